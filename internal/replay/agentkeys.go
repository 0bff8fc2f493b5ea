package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// An agentic request's affinity identity, as the AISimulate adapter
// (scripts/offline_router_policy.py) and Dynamo's replay adapters key it
// (scripts/affinity_keys.json is the spec, with vectors): the play is the
// scope, so that two plays never share a binding. Under key session, and
// for a router without affinity (session_hash hashes the same session),
// a request's session is ["session",play,conversation]; under
// sibling_group a spawned conversation's requests carry
// ["siblings",play,root,parent] as their parent session (siblings bind
// together, apart from their parent), and a root conversation's
// ["root",play,root,conversation] as their session.

// maxGroupKeyBytes bounds a key, as Dynamo bounds one; a longer one is
// sent as its digest, as the adapter sends it.
const maxGroupKeyBytes = 256

// agentKeys are the session and parent session a place of an agentic
// request carries under the router's affinity key (one is "").
func agentKeys(a *Agent, key protocol.AffinityKey) (session, parent string) {
	switch {
	case key != protocol.AffinityKeySiblingGroup:
		return groupKey("session", a.Play, a.Conversation), ""
	case a.Parent != "":
		return "", groupKey("siblings", a.Play, a.Root, a.Parent)
	}
	return groupKey("root", a.Play, a.Root, a.Conversation), ""
}

// groupKey is the compact JSON array of parts, as serde_json writes it,
// or "sha256:" and its digest's hex past maxGroupKeyBytes.
func groupKey(parts ...string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		serdeString(&b, p)
	}
	b.WriteByte(']')
	if b.Len() <= maxGroupKeyBytes {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// serdeString writes s as a JSON string the way serde_json does, which
// encoding/json does not: only the quote, the backslash and control
// characters escaped (\b \f \n \r \t, else \u00xx in lowercase hex), and
// everything else, U+2028 and <&> included, as it is.
func serdeString(b *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// orNil is s for a command's optional field: nil when "".
func orNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
