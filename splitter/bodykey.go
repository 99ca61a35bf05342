package splitter

import (
	"crypto/sha256"
	"hash"
)

// The ledger key of a request (docs/money.md): SHA-256 of the key scope
// (provider and base URL), the model, the url and the body in canonical
// form, cut to 128 bits. The canonical form drops the whitespace between
// JSON tokens, so that a file written with ", " and ": " separators and
// the same file compacted have the same keys; members in another order, or
// numbers spelled otherwise (1.0 for 1), make another key: such a request
// is bought again, never answered wrongly. SHA-256 rather than a fast
// non-cryptographic hash because a key collision would hand one request
// another's answer; with the CPU's SHA extensions it costs about a second
// per GB of bodies spread over the workers.

// bodyHasher computes ledger keys; one per worker.
type bodyHasher struct {
	h     hash.Hash
	scope []byte
	sum   []byte
	pre   []byte // scope, model, url: written at once (no conversions to escape)
}

func newBodyHasher(scope string) *bodyHasher {
	return &bodyHasher{h: sha256.New(), scope: append([]byte(scope), 0)}
}

// key is the ledger key of a body; compact tells that the scanner saw no
// whitespace between its tokens (the common case: it is hashed as it is,
// without another walk).
func (b *bodyHasher) key(model, url string, body []byte, compact bool) (k [16]byte) {
	h := b.h
	h.Reset()
	b.pre = append(append(append(append(append(b.pre[:0], b.scope...), model...), 0), url...), 0)
	h.Write(b.pre)
	if compact {
		h.Write(body)
	} else {
		writeCompact(h, body)
	}
	b.sum = h.Sum(b.sum[:0])
	copy(k[:], b.sum)
	return k
}

// writeCompact writes the valid JSON value v without the whitespace
// between its tokens.
func writeCompact(h hash.Hash, v []byte) {
	start := 0
	inStr, esc := false, false
	for i, c := range v {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if i > start {
				h.Write(v[start:i])
			}
			start = i + 1
		}
	}
	if start < len(v) {
		h.Write(v[start:])
	}
}
