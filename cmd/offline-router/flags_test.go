package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestConfigFlagDefaultsAreTheContract: every config flag set explicitly to
// the default it shows in --help loads as protocol.DefaultConfig. A flag
// whose shown default drifted from the contract's, or whose type does not
// fit its key, fails here.
func TestConfigFlagDefaultsAreTheContract(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	var o serveOptions
	o.bindConfig(cmd)
	var args []string
	for _, cf := range configFlags {
		fl := cmd.Flags().Lookup(flagName(cf.key))
		if fl == nil {
			t.Fatalf("no flag for %s", cf.key)
		}
		if optional := fl.DefValue == "0" && cf.key != "seed"; optional {
			continue // an unset optional key: setting it to 0 would set it
		}
		args = append(args, "--"+fl.Name+"="+fl.DefValue)
	}
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.loadConfig(cmd.Flags())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.DefaultConfig(), cfg); diff != "" {
		t.Fatalf("flags at their shown defaults (-contract +flags):\n%s", diff)
	}
}
