package splitter

import (
	"crypto/sha256"
	"hash"
)

// The ledger key of a request (docs/money.md): SHA-256 of the key scope
// (provider and base URL), the model, the url and the body in canonical
// form (canon.go: RFC 8785 with integers kept to their digits), cut to 128
// bits. A body already in that form (compact, in order, nothing to
// rewrite) is hashed as it is, without another walk; its key is the one
// it had before keys were canonical. SHA-256 rather than a fast
// non-cryptographic hash because a key collision would hand one request
// another's answer; with the CPU's SHA extensions it costs about a second
// per GB of bodies spread over the workers.
//
// Until canonical keys, the key hashed the body's bytes without the
// whitespace between tokens (the legacy key). Ledgers hold answers under
// those keys; a plan that may find some (LegacyKeys) also computes the
// legacy key of each body whose canonical form differs, and looks it up
// when the canonical key has no answer (reuse.go).

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

// key is the ledger key of the body at f in line l, whose canonical form
// cn recorded while scanning it. With legacy, old is the legacy key (k
// itself when the two are equal: the body was in canonical form).
func (b *bodyHasher) key(model, url string, l []byte, f field, cn *canonRec, legacy bool) (k, old [16]byte) {
	b.pre = append(append(append(append(append(b.pre[:0], b.scope...), model...), 0), url...), 0)
	body := l[f.start:f.end]
	if !cn.dirty && !f.spaced {
		k = b.sum128(body, false)
		return k, k
	}
	b.h.Reset()
	if !cn.emit(b.h, b.pre, l, f.spaced) {
		// No canonical form (a lone surrogate, a number out of range): the
		// legacy key, which no canonical form can have.
		k = b.sum128(body, f.spaced)
		return k, k
	}
	k = b.digest()
	if !legacy {
		return k, k
	}
	return k, b.sum128(body, f.spaced)
}

// legacyKey is the legacy key of body (spaced: with whitespace between
// its tokens).
func (b *bodyHasher) legacyKey(model, url string, body []byte, spaced bool) [16]byte {
	b.pre = append(append(append(append(append(b.pre[:0], b.scope...), model...), 0), url...), 0)
	return b.sum128(body, spaced)
}

// sum128 hashes the prefix and v (compacted first when spaced).
func (b *bodyHasher) sum128(v []byte, spaced bool) (k [16]byte) {
	h := b.h
	h.Reset()
	h.Write(b.pre)
	if spaced {
		writeCompact(h, v)
	} else {
		h.Write(v)
	}
	return b.digest()
}

// digest is the key of what b.h was given.
func (b *bodyHasher) digest() (k [16]byte) {
	b.sum = b.h.Sum(b.sum[:0])
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
