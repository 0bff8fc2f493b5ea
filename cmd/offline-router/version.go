package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/offline-router/offline-router/internal/protocol"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise
// the module version from the build info is shown.
var version = ""

// toolVersion is this binary's version: the link-time one, else the
// module's, else "devel".
func toolVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// versionLine is what `offline-router version` and `--version` print: the
// tool, and the versions a host or a report reader checks behaviour by.
func versionLine() string {
	return fmt.Sprintf("offline-router %s (wire protocol v%d, report schema v%d)\nfollows %s\nfollows %s (policy bridge)\n",
		toolVersion(), protocol.Version, protocol.ReportSchemaVersion, protocol.Followed.Dynamo, protocol.Followed.AISimulate)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the wire protocol's and the report schema's (same as --version)",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), versionLine())
		},
	}
}
