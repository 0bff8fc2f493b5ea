package protocol

// Version is the wire protocol's version. It changes when a command or a
// response changes meaning, so a host can tell; `offline-router --version`
// prints it, and a config command's answer carries it.
const Version = 1

// ReportSchemaVersion is the version of replay's JSON report
// (docs/report.schema.json). It lives here, beside the protocol's, because
// both are printed together by --version and the config answer.
const ReportSchemaVersion = 1

// Follows names the one commit of each project whose behaviour the router
// follows, so "behaves like Dynamo" is checked against a fixed target:
// every rule taken from Dynamo is read at this commit (the public copies
// of its files differ between versions: the policy-class YAML, the LoRA
// salt, the bridge's tier handling). `offline-router --version` prints
// them, every replay report records them, and docs/PROTOCOL.md opens with
// them and lists each departure.
type Follows struct {
	// Dynamo is ai-dynamo/dynamo's commit: the router (lib/kv-router), its
	// flags and its policy-class configuration.
	Dynamo string `json:"dynamo"`
	// AISimulate is ai-dynamo/aisimulate's commit: the Python policy
	// bridge scripts/offline_router_policy.py speaks (policy API version 1).
	AISimulate string `json:"aisimulate"`
}

// Followed is the pin.
var Followed = Follows{
	Dynamo:     "ai-dynamo/dynamo@ff96fb031aa6fdc45410df8c8d9cd32751222afd",
	AISimulate: "ai-dynamo/aisimulate@a298db2eae5b8c5ead28137c8715e5bcafaa1ae3",
}
