package replay

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/goccy/go-json"
	"github.com/invopop/jsonschema"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite docs/report.schema.json from the report's Go types")

// TestReportSchemaIsCurrent: docs/report.schema.json is generated from the
// Report types and their comments; a field added, renamed or documented
// anew without regenerating it fails here (go test ./internal/replay/
// -run TestReportSchemaIsCurrent -update-schema).
func TestReportSchemaIsCurrent(t *testing.T) {
	// cluster.Config and protocol.Config would share one definition by
	// name: the cluster's keeps the name it had in replay.
	r := &jsonschema.Reflector{Namer: func(t reflect.Type) string {
		if t == reflect.TypeFor[cluster.Config]() {
			return "ClusterConfig"
		}
		return t.Name()
	}}
	for pkg, dir := range map[string]string{"replay": ".", "protocol": "../protocol", "cluster": "../cluster"} {
		if err := r.AddGoComments("github.com/offline-router/offline-router/internal/"+pkg, dir); err != nil {
			t.Fatal(err)
		}
	}
	s := r.Reflect(&Report{})
	s.ID = "https://github.com/offline-router/offline-router/docs/report.schema.json"
	s.Title = "offline-router replay report"
	s.Description = "The JSON report of `offline-router replay --report`, schema_version " +
		strconv.Itoa(protocol.ReportSchemaVersion) + "."
	got, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("..", "..", "docs", "report.schema.json")
	if *updateSchema {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/report.schema.json is not what the Report types give: run go test ./internal/replay/ -run TestReportSchemaIsCurrent -update-schema")
	}
}
