package protocol

// Version is the wire protocol's version. It changes when a command or a
// response changes meaning, so a host can tell; `offline-router --version`
// prints it, and a config command's answer carries it.
const Version = 1

// ReportSchemaVersion is the version of replay's JSON report
// (docs/report.schema.json). It lives here, beside the protocol's, because
// both are printed together by --version and the config answer.
const ReportSchemaVersion = 1
