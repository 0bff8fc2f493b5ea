package workload

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// TestMixedIsValidAndReproducible: every line decodes, the same seed gives
// the same bytes, and another seed gives other bytes.
func TestMixedIsValidAndReproducible(t *testing.T) {
	gen := func(seed uint64) []byte {
		var b bytes.Buffer
		m := DefaultMixed(3000, seed)
		m.Workers = 8
		if err := m.Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a := gen(1)
	if !bytes.Equal(a, gen(1)) {
		t.Fatal("same seed, different stream")
	}
	if bytes.Equal(a, gen(2)) {
		t.Fatal("the seed does not matter")
	}
	ops := map[protocol.Op]int{}
	sc := bufio.NewScanner(bytes.NewReader(a))
	sc.Buffer(nil, 1<<20)
	var d wire.Decoded
	for sc.Scan() {
		wire.Decode(sc.Bytes(), &d)
		if d.Err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), d.Err)
		}
		ops[d.Cmd.Op]++
	}
	for _, op := range []protocol.Op{protocol.OpWorkerReady, protocol.OpPlace, protocol.OpDispatchCommitted, protocol.OpDispatchAborted,
		protocol.OpPrefillCompleted, protocol.OpObserve, protocol.OpRequestTerminal} {
		if ops[op] == 0 {
			t.Errorf("no %s in the stream: %v", op, ops)
		}
	}
	if ops[protocol.OpPlace] != ops[protocol.OpDispatchCommitted]+ops[protocol.OpDispatchAborted] ||
		ops[protocol.OpDispatchCommitted] != ops[protocol.OpRequestTerminal] {
		t.Errorf("every request must end: %v", ops)
	}
}
