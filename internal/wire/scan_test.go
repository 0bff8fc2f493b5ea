package wire

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// slowPlainUint is plainUint one digit at a time, as it was.
func slowPlainUint(b []byte) (v uint64, n int, ok bool) {
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		d := uint64(b[n] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, 0, false
		}
		v = v*10 + d
		n++
	}
	return finishUint(b, v, n)
}

// TestPlainUintEightAtATime: the eight-digit steps give what one digit at a
// time gives, on digit runs of every length with anything after them,
// near the end of the buffer or not.
func TestPlainUintEightAtATime(t *testing.T) {
	for _, c := range []string{"0", "7", "00", "01", "18446744073709551615", "18446744073709551616", "99999999999999999999",
		"1844674407370955161", "12345678", "123456789", "1234567,", "12345678]", "1.5", "1e3", "12-", "", "x", "0000000000000000000001"} {
		for _, tail := range []string{"", ",", "]}", `,"a":1}`} {
			b := []byte(c + tail)
			v, n, ok := plainUint(b)
			wv, wn, wok := slowPlainUint(b)
			if v != wv || n != wn || ok != wok {
				t.Errorf("%q: got %d %d %v, want %d %d %v", b, v, n, ok, wv, wn, wok)
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		digits := rapid.StringMatching(`[0-9]{0,22}`).Draw(t, "digits")
		tail := rapid.SampledFrom([]string{"", ",", "]", "}", ".5", "e2", "-", "a", "0", ",1,2,3,4,5,6,7"}).Draw(t, "tail")
		b := []byte(digits + tail)
		v, n, ok := plainUint(b)
		wv, wn, wok := slowPlainUint(b)
		if v != wv || n != wn || ok != wok {
			t.Fatalf("%q: got %d %d %v, want %d %d %v", b, v, n, ok, wv, wn, wok)
		}
		if ok {
			if p, err := strconv.ParseUint(string(b[:n]), 10, 64); err != nil || p != v {
				t.Fatalf("%q: %d, strconv says %d %v", b, v, p, err)
			}
		}
	})
}

// TestPlainBlockAgrees: a stored block read in one pass is the block the
// general reading gives (forced here by a blank after its brace), and a
// block the pass does not take is still read, or refused, as before.
func TestPlainBlockAgrees(t *testing.T) {
	line := func(block string) []byte {
		return []byte(`{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[` + block + `]}}}}]}`)
	}
	rapid.Check(t, func(t *rapid.T) {
		num := rapid.StringMatching(`0|[1-9][0-9]{0,20}|0[0-9]{1,3}|-1|1\.5|1e3`)
		block := rapid.SampledFrom([]string{
			`{"block_hash":%s,"tokens_hash":%s}`, `{"tokens_hash":%s,"block_hash":%s}`, `{"block_hash":%s ,"tokens_hash":%s}`,
			`{"block_hash":%s,"tokens_hash":%s,"token_ids":null}`, `{"block_hash":%s,"tokens_hash":%s`, `{"block_hash":%s,"tokens_hash":%s]`,
		}).Draw(t, "form")
		b := fmt.Sprintf(block, num.Draw(t, "bh"), num.Draw(t, "th"))
		var fast, general Decoded
		Decode(line(b), &fast)
		Decode(line(strings.Replace(b, "{", "{ ", 1)), &general)
		switch {
		case (fast.Err == nil) != (general.Err == nil):
			t.Fatalf("%s: %v, in general %v", b, fast.Err, general.Err)
		case fast.Err != nil && fast.Err.Code != general.Err.Code:
			t.Fatalf("%s: %s, in general %s", b, fast.Err.Code, general.Err.Code)
		case fast.Err == nil && !reflect.DeepEqual(fast.Cmd.Events, general.Cmd.Events):
			t.Fatalf("%s: %+v, in general %+v", b, fast.Cmd.Events, general.Cmd.Events)
		}
	})
}
