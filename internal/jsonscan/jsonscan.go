// Package jsonscan checks and walks JSON text without decoding it, for
// the hot paths that handle a million result lines per run (BENCHMARKS.md,
// "End to end"): validating a line, finding an object's members, and telling
// whether encoding/json would write a raw value unchanged.
//
// Every function here is a fast path with encoding/json as the authority:
// where they answer false (or cannot tell), the caller falls back to
// encoding/json, which decides. So a false negative costs time, never
// behaviour; a true answer must always agree with encoding/json.
package jsonscan

import "bytes"

// maxDepth bounds nesting (encoding/json allows 10,000): deeper values are
// not valid here, and the caller's fallback decides.
const maxDepth = 1000

// Byte classes inside strings.
const (
	plain   = 0
	stop    = 1 // '"', '\\' or a control character: the string loop stops
	escHTML = 2 // '<', '>', '&', and 0xE2 (the first byte of U+2028 and U+2029)
)

var strClass = func() (t [256]byte) {
	for c := 0; c < 0x20; c++ {
		t[c] = stop
	}
	t['"'], t['\\'] = stop, stop
	t['<'], t['>'], t['&'], t[0xE2] = escHTML, escHTML, escHTML, escHTML
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// checker validates one value; canonical additionally requires the form
// json.Marshal gives a json.RawMessage: no whitespace between tokens, no
// character it would escape in a string.
type checker struct {
	b         []byte
	canonical bool
	bad       bool
	// nc counts what, in a valid value, keeps it from being canonical:
	// runs of whitespace between tokens and characters encoding/json
	// escapes in strings. A value checked without nc moving is canonical.
	nc int
}

// Valid reports whether b is exactly one JSON value, optionally surrounded
// by whitespace (json.Valid; deeper than 1,000 levels: false).
func Valid(b []byte) bool {
	c := checker{b: b}
	i := c.ws(0)
	i = c.value(i, 0)
	i = c.ws(i)
	return !c.bad && i == len(b)
}

// Canonical reports whether b is one valid JSON value that json.Marshal of
// json.RawMessage(b) writes unchanged: no whitespace anywhere outside
// strings, and no '<', '>', '&', U+2028 or U+2029 inside them (which
// encoding/json escapes).
func Canonical(b []byte) bool {
	c := checker{b: b, canonical: true}
	i := c.value(0, 0)
	return !c.bad && i == len(b)
}

func (c *checker) fail() int { c.bad = true; return len(c.b) }

func (c *checker) ws(i int) int {
	if i >= len(c.b) || c.b[i] > ' ' || c.canonical {
		return i
	}
	j := i
	for i < len(c.b) && isSpace(c.b[i]) {
		i++
	}
	if i != j {
		c.nc++
	}
	return i
}

// value checks the value at b[i:] and returns the index after it.
func (c *checker) value(i, depth int) int {
	if c.bad || i >= len(c.b) {
		return c.fail()
	}
	switch ch := c.b[i]; {
	case ch == '"':
		return c.str(i + 1)
	case ch == '{':
		return c.object(i+1, depth+1)
	case ch == '[':
		return c.array(i+1, depth+1)
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number(i)
	case ch == 't':
		return c.lit(i, "true")
	case ch == 'f':
		return c.lit(i, "false")
	case ch == 'n':
		return c.lit(i, "null")
	}
	return c.fail()
}

func (c *checker) lit(i int, s string) int {
	if len(c.b)-i < len(s) || string(c.b[i:i+len(s)]) != s {
		return c.fail()
	}
	return i + len(s)
}

// str checks a string whose opening quote is at i-1.
func (c *checker) str(i int) int {
	b := c.b
	for i < len(b) {
		// Most bytes are plain: skip them eight at a time, then one at a
		// time.
		for ; i+8 <= len(b); i += 8 {
			w := b[i : i+8 : i+8]
			if strClass[w[0]]|strClass[w[1]]|strClass[w[2]]|strClass[w[3]]|
				strClass[w[4]]|strClass[w[5]]|strClass[w[6]]|strClass[w[7]] != plain {
				break
			}
		}
		for i < len(b) && strClass[b[i]] == plain {
			i++
		}
		if i == len(b) {
			break
		}
		switch strClass[b[i]] {
		case escHTML:
			if b[i] != 0xE2 || i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				if c.canonical {
					return c.fail()
				}
				c.nc++
			}
			i++
			continue
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return c.fail()
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !hex(b[i+2]) || !hex(b[i+3]) || !hex(b[i+4]) || !hex(b[i+5]) {
					return c.fail()
				}
				i += 6
			default:
				return c.fail()
			}
		default: // a control character
			return c.fail()
		}
	}
	return c.fail()
}

func hex(ch byte) bool {
	return ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F'
}

func digit(b []byte, i int) bool { return i < len(b) && b[i] >= '0' && b[i] <= '9' }

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *checker) number(i int) int {
	b := c.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digit(b, i):
		for digit(b, i) {
			i++
		}
	default:
		return c.fail()
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digit(b, i) {
			return c.fail()
		}
		for digit(b, i) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digit(b, i) {
			return c.fail()
		}
		for digit(b, i) {
			i++
		}
	}
	return i
}

func (c *checker) object(i, depth int) int {
	if depth > maxDepth {
		return c.fail()
	}
	b := c.b
	i = c.ws(i)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for !c.bad {
		if i >= len(b) || b[i] != '"' {
			return c.fail()
		}
		i = c.ws(c.str(i + 1))
		if i >= len(b) || b[i] != ':' {
			return c.fail()
		}
		i = c.ws(c.value(c.ws(i+1), depth))
		if i >= len(b) {
			return c.fail()
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = c.ws(i + 1)
		default:
			return c.fail()
		}
	}
	return len(b)
}

func (c *checker) array(i, depth int) int {
	if depth > maxDepth {
		return c.fail()
	}
	b := c.b
	i = c.ws(i)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for !c.bad {
		i = c.ws(c.value(i, depth))
		if i >= len(b) {
			return c.fail()
		}
		switch b[i] {
		case ']':
			return i + 1
		case ',':
			i = c.ws(i + 1)
		default:
			return c.fail()
		}
	}
	return len(b)
}

// Object reports whether b is a valid JSON object (as Valid), calling fn
// with the raw key and raw value of each of its members, in order, as it
// checks them; a false from fn stops it (Object then reports false).
func Object(b []byte, fn func(key, val []byte) bool) bool {
	c := checker{b: b}
	i := c.ws(0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = c.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		return c.ws(i+1) == len(b)
	}
	for !c.bad {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		k := i + 1
		i = c.str(k)
		if c.bad {
			return false
		}
		key := b[k : i-1]
		i = c.ws(i)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		v := c.ws(i + 1)
		i = c.value(v, 1)
		if c.bad || !fn(key, b[v:i]) {
			return false
		}
		i = c.ws(i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return c.ws(i+1) == len(b)
		case ',':
			i = c.ws(i + 1)
		default:
			return false
		}
	}
	return false
}

// MaxPath is the deepest member Walk reports.
const MaxPath = 8

// Walk reports whether b is a valid JSON object (as Valid) and, in the same
// pass, calls fn for each member of that object and of every object nested
// in it through objects only (not through arrays), down to levels deep (at
// most MaxPath). For a member, fn gets its depth (1 for the members of b),
// its raw key (between the quotes, escapes as written), its raw value and
// whether Canonical(value) holds, once the value is checked: the members
// of a nested object come before the member that holds it. Before the
// members of a nested object it walks, Walk calls fn with that object's
// depth and key and a nil value, so that fn can keep the path. A false
// from fn stops Walk (Walk then reports false).
//
// (fn gets plain arguments, passed in registers: a path handed over at
// every call measured a fifth of the walk.)
func Walk(b []byte, levels int, fn func(depth int, key, val []byte, canonical bool) bool) bool {
	w := walker{checker: checker{b: b}, levels: min(levels, MaxPath)}
	i := w.ws(0)
	if i >= len(b) || b[i] != '{' || w.levels < 1 {
		return false
	}
	i = w.ws(w.object(i+1, 1, fn))
	return !w.bad && i == len(b)
}

// walker is the state of Walk. (fn is passed along rather than kept
// here: what fn gets leaks, and escape analysis would move fn and its
// captures to the heap with the walker.)
type walker struct {
	checker
	levels int
}

// object checks the object at nesting depth whose '{' is at i-1, calling
// fn for its members (their path has depth keys).
func (w *walker) object(i, depth int, fn func(depth int, key, val []byte, canonical bool) bool) int {
	if depth > maxDepth {
		return w.fail()
	}
	b := w.b
	i = w.ws(i)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for !w.bad {
		if i >= len(b) || b[i] != '"' {
			return w.fail()
		}
		k := i + 1
		i = w.str(k)
		if w.bad {
			return len(b)
		}
		key := b[k : i-1]
		i = w.ws(i)
		if i >= len(b) || b[i] != ':' {
			return w.fail()
		}
		v := w.ws(i + 1)
		nc := w.nc
		if v < len(b) && b[v] == '{' && depth < w.levels {
			if !fn(depth, key, nil, false) {
				return w.fail()
			}
			i = w.object(v+1, depth+1, fn)
		} else {
			i = w.value(v, depth)
		}
		if w.bad || !fn(depth, key, b[v:i], w.nc == nc) {
			return w.fail()
		}
		i = w.ws(i)
		if i >= len(b) {
			return w.fail()
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = w.ws(i + 1)
		default:
			return w.fail()
		}
	}
	return len(b)
}

// Members calls fn with the raw key (between its quotes, escapes as
// written) and the raw value of each member of the object obj, in order,
// until fn returns false. obj must be valid JSON (Valid): Members does not
// check it, and reports false if obj is not an object.
func Members(obj []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		k := i + 1
		i = skipString(obj, k)
		key := obj[k : i-1]
		i = skipSpace(obj, i)
		i = skipSpace(obj, i+1) // the colon
		v := i
		i = skipValue(obj, i)
		if !fn(key, obj[v:i]) {
			return true
		}
		i = skipSpace(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the closing quote of the string whose
// content starts at i.
func skipString(b []byte, i int) int {
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		// Escaped if preceded by an odd number of backslashes.
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

// structural marks the bytes skipValue stops at inside a container.
var structural = func() (t [256]bool) {
	for _, c := range `"{}[]` {
		t[c] = true
	}
	return t
}()

// skipValue returns the index after the valid value at i.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i+1)
	case '{', '[':
		depth := 0
		for i < len(b) {
			c := b[i]
			if !structural[c] {
				i++
				continue
			}
			switch c {
			case '"':
				i = skipString(b, i+1)
				continue
			case '{', '[':
				depth++
			default:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// PlainString reports whether json.Marshal(s) is s between quotes: s is
// valid UTF-8 without control characters, '"', '\\', '<', '>', '&', U+2028
// or U+2029.
func PlainString(s string) bool {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch < 0x80 {
			if strClass[ch] != plain {
				return false
			}
			continue
		}
		return plainUTF8(s[i:])
	}
	return true
}

func plainUTF8(s string) bool {
	for i, r := range s {
		if r < 0x80 {
			if strClass[byte(r)] != plain {
				return false
			}
			continue
		}
		if r == 0xFFFD && (len(s)-i < 3 || s[i:i+3] != "\uFFFD") || r == '\u2028' || r == '\u2029' {
			return false // invalid UTF-8 (encoding/json writes \ufffd) or escaped
		}
	}
	return true
}
