package wire

// KeyHints suggests, for a key that is not a known one, the known key it
// differs from only in ASCII case or in '_' and '-': the usual slip of a
// hand-written file ("INPUT_LENGTH", "block-size"). Built once; Suggest
// allocates nothing, so it may run on every line.
type KeyHints map[string]string

// hintBuf bounds a squashed key: a longer one matches no known key.
const hintBuf = 64

// NewKeyHints makes the hints for the known keys.
func NewKeyHints(names ...string) KeyHints {
	k := make(KeyHints, len(names))
	for _, name := range names {
		var buf [hintBuf]byte
		sq := squash(buf[:0], name)
		if len(sq) == hintBuf {
			panic("key hint: " + name + " is too long")
		}
		k[string(sq)] = name
	}
	return k
}

// Suggest returns the known key that key is a slip of, if any.
func (k KeyHints) Suggest(key string) (string, bool) {
	var buf [hintBuf]byte
	name, ok := k[string(squash(buf[:0], key))]
	return name, ok
}

// squash appends key to buf lower-cased (ASCII) and without '_' or '-',
// stopping when buf is full.
func squash(buf []byte, key string) []byte {
	for i := range len(key) {
		c := key[i]
		switch {
		case c == '_' || c == '-':
			continue
		case len(buf) == cap(buf):
			return buf
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}
