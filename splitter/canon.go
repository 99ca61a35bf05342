package splitter

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The canonical form of a request body, which its ledger key hashes
// (docs/money.md, "Never buying the same answer twice"): RFC 8785 (JCS),
// with two departures that keep apart requests a provider tells apart.
//
//   - Escapes resolved: a string is written as JCS writes it (raw UTF-8;
//     only '"', '\\' and control characters escaped, \b \t \n \f \r by
//     name, the others as \u00xx).
//   - Members sorted by their names' UTF-16 code units, recursively, as
//     JCS sorts them; members of one name keep their order (JCS rejects
//     duplicate names; a provider takes the first or the last, and either
//     depends only on that order). Departure: the members of an object
//     that is the value of a member named "properties" keep their order,
//     since a JSON schema's property order is the order structured
//     outputs produce fields in (OpenAI documents it).
//   - Numbers by value: one written with a fraction or an exponent is read
//     as the nearest double, as providers read it, and written as JCS
//     writes it (1.0 and 1e0 become 1, 0.50 becomes 0.5). Departure: an
//     integral value is written as its exact digits, and an integer
//     written without fraction or exponent keeps its digits whatever its
//     size (JCS would round 12345678901234567891 to the nearest double,
//     12345678901234567000, merging seeds the provider tells apart).
//
// A body the form cannot be made of (a lone surrogate escape, a number
// beyond the range of a double) keeps the old key: its bytes without the
// whitespace between tokens, which no canonical form can equal.
//
// The scanner records, in the pass that validates the line, where the
// body's objects and members are and which strings and numbers are not in
// canonical form (canonRec); a body with none of those and in order is its
// own canonical form and is hashed as it is. Otherwise emit writes the
// form from those records, each byte of the body once (no second parse).

// canonObj is an object of the body, in the order of their opening braces.
type canonObj struct {
	start, end int32 // '{' and one past '}'
	m0, m1     int32 // its members in canonRec.mems
	f0, f1     int32 // the fixes inside it
	next       int32 // the first object after it and its descendants
	sorted     bool  // members in canonical order (or kept in theirs)
}

// canonMem is a member: its name (decoded when it has escapes) and where
// the member's text is, with the first object and fix at or after it.
type canonMem struct {
	name   []byte
	ks, ve int32 // the name's opening quote; one past the value
	o0, f0 int32
}

// canonFix is a string or number token whose canonical text differs from
// its spelling.
type canonFix struct {
	start, end int32
	num        bool
}

// canonRec is what the scanner records of a body; one per worker, reused.
type canonRec struct {
	objs  []canonObj
	mems  []canonMem
	stack []canonMem // members of the objects still open
	fixes []canonFix
	keep  bool // the next object keeps its members' order
	dirty bool // an object out of order or a fix: the body is not canonical

	l      []byte
	spaced bool
	out    []byte
	order  []int32
}

func (c *canonRec) reset() {
	c.objs, c.mems, c.stack, c.fixes = c.objs[:0], c.mems[:0], c.stack[:0], c.fixes[:0]
	c.keep, c.dirty = false, false
}

// open records an object starting at i; it returns its index.
func (c *canonRec) open(i int) int {
	c.objs = append(c.objs, canonObj{start: int32(i), f0: int32(len(c.fixes)), sorted: true})
	return len(c.objs) - 1
}

// member records a member whose name (decoded) starts at ks; base is the
// object's first member on the stack, f0 the fixes before its name.
func (c *canonRec) member(oi, base int, name []byte, ks, f0 int, keep bool) {
	if !keep && len(c.stack) > base && compareUTF16(c.stack[len(c.stack)-1].name, name) > 0 {
		c.objs[oi].sorted = false
		c.dirty = true
	}
	c.stack = append(c.stack, canonMem{name: name, ks: int32(ks), o0: int32(len(c.objs)), f0: int32(f0)})
}

// valueEnd records where the last member's value ends.
func (c *canonRec) valueEnd(i int) { c.stack[len(c.stack)-1].ve = int32(i) }

// close ends object oi at end; its members move from the stack.
func (c *canonRec) close(oi, base, end int) {
	o := &c.objs[oi]
	o.end, o.f1, o.next = int32(end), int32(len(c.fixes)), int32(len(c.objs))
	o.m0 = int32(len(c.mems))
	c.mems = append(c.mems, c.stack[base:]...)
	o.m1 = int32(len(c.mems))
	c.stack = c.stack[:base]
}

// fix records a token to rewrite.
func (c *canonRec) fix(start, end int, num bool) {
	c.fixes = append(c.fixes, canonFix{start: int32(start), end: int32(end), num: num})
	c.dirty = true
}

// emit returns the canonical form of the body recorded from line l (the
// first object recorded); spaced tells that there is whitespace between
// its tokens. ok is false when the body has no canonical form. The result
// is valid until the next call.
func (c *canonRec) emit(l []byte, spaced bool) (out []byte, ok bool) {
	c.l, c.spaced, c.out = l, spaced, c.out[:0]
	ok = c.object(0)
	c.l = nil
	return c.out, ok
}

func (c *canonRec) object(oi int) bool {
	o := c.objs[oi]
	if o.sorted {
		return c.span(int(o.start), int(o.end), oi+1, int(o.f0))
	}
	base := len(c.order)
	for m := o.m0; m < o.m1; m++ {
		c.order = append(c.order, m)
	}
	ord := c.order[base:]
	slices.SortStableFunc(ord, func(a, b int32) int { return compareUTF16(c.mems[a].name, c.mems[b].name) })
	c.out = append(c.out, '{')
	for k, mi := range ord {
		if k > 0 {
			c.out = append(c.out, ',')
		}
		m := &c.mems[mi]
		if !c.span(int(m.ks), int(m.ve), int(m.o0), int(m.f0)) {
			return false
		}
	}
	c.out = append(c.out, '}')
	c.order = c.order[:base]
	return true
}

// span writes l[a:b] in canonical form; oi and fi are the first object and
// fix at or after a.
func (c *canonRec) span(a, b, oi, fi int) bool {
	for a < b {
		next, obj, fix := b, false, false
		if oi < len(c.objs) && int(c.objs[oi].start) < b {
			next, obj = int(c.objs[oi].start), true
		}
		if fi < len(c.fixes) && int(c.fixes[fi].start) < next {
			next, obj, fix = int(c.fixes[fi].start), false, true
		}
		c.raw(a, next)
		switch {
		case fix:
			f := c.fixes[fi]
			if !c.rewrite(c.l[f.start:f.end], f.num) {
				return false
			}
			a, fi = int(f.end), fi+1
		case obj:
			o := c.objs[oi]
			if !c.object(oi) {
				return false
			}
			a, fi, oi = int(o.end), int(o.f1), int(o.next)
		default:
			a = b
		}
	}
	return true
}

// raw writes l[a:b], which starts outside a string, without the whitespace
// between tokens.
func (c *canonRec) raw(a, b int) {
	if !c.spaced {
		c.out = append(c.out, c.l[a:b]...)
		return
	}
	inStr, esc := false, false
	for _, ch := range c.l[a:b] {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				inStr = false
			}
		case ch == '"':
			inStr = true
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			continue
		}
		c.out = append(c.out, ch)
	}
}

func (c *canonRec) rewrite(tok []byte, num bool) bool {
	var ok bool
	if num {
		c.out, ok = appendCanonicalNumber(c.out, tok)
	} else {
		c.out, ok = appendCanonicalString(c.out, tok)
	}
	return ok
}

// appendCanonicalNumber appends the canonical text of the JSON number tok
// (see the top of this file); ok is false beyond the range of a double.
func appendCanonicalNumber(dst, tok []byte) ([]byte, bool) {
	v, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return dst, false
	}
	if v == math.Trunc(v) {
		if v == 0 {
			return append(dst, '0'), true // -0 too
		}
		return strconv.AppendFloat(dst, v, 'f', 0, 64), true // exact digits
	}
	s, err := jcs.NumberToJSON(v)
	if err != nil {
		return dst, false
	}
	return append(dst, s...), true
}

// appendCanonicalString appends the canonical text of the valid JSON
// string tok (quotes included); ok is false for a lone surrogate.
func appendCanonicalString(dst, tok []byte) ([]byte, bool) {
	dst = append(dst, '"')
	s := tok[1 : len(tok)-1]
	for i := 0; i < len(s); {
		ch := s[i]
		if ch != '\\' {
			dst = append(dst, ch)
			i++
			continue
		}
		var r rune
		switch s[i+1] {
		case 'u':
			r = hex4(s[i+2:])
			i += 6
			if r >= 0xDC00 && r < 0xE000 {
				return dst, false
			}
			if r >= 0xD800 && r < 0xDC00 {
				if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
					return dst, false
				}
				lo := hex4(s[i+2:])
				if lo < 0xDC00 || lo >= 0xE000 {
					return dst, false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
		default:
			r = rune(unescapeByte(s[i+1]))
			i += 2
		}
		dst = appendCanonicalRune(dst, r)
	}
	return append(dst, '"'), true
}

func hex4(b []byte) rune {
	var v rune
	for _, ch := range b[:4] {
		v = v<<4 | rune(hexVal(ch))
	}
	return v
}

// unescapeByte is the character of a one-letter escape.
func unescapeByte(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\', '/'
}

// appendCanonicalRune writes r as JCS writes it in a string.
func appendCanonicalRune(dst []byte, r rune) []byte {
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hexDigits = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// canonicalEscape reports whether the escape at e (after the backslash:
// e[0] is its letter, a \u escape's four digits follow) is written so in
// canonical form.
func canonicalEscape(e []byte) bool {
	switch e[0] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		v := hex4(e[1:])
		switch {
		case v >= 0x20, v == '\b', v == '\f', v == '\n', v == '\r', v == '\t':
			return false
		}
		return !upperHex(e[3]) && !upperHex(e[4]) // lowercase, as JCS writes \u001f
	}
	return false // '/'
}

func upperHex(ch byte) bool { return ch >= 'A' && ch <= 'F' }

// canonicalNumber reports whether the JSON number tok is written as its
// canonical form: an integer other than -0, or a fraction as ES6 writes
// it (no exponent, no trailing zero, 15 significant digits at most, at
// least 1e-6: such a decimal is the shortest that reads as its double).
func canonicalNumber(tok []byte, frac, exp bool) bool {
	if exp {
		return false
	}
	neg := tok[0] == '-'
	if neg {
		tok = tok[1:]
	}
	if !frac {
		return !neg || tok[0] != '0'
	}
	if tok[len(tok)-1] == '0' {
		return false
	}
	digits, lead := 0, tok[0] == '0'
	zeros := 0
	for _, ch := range tok {
		switch {
		case ch == '.':
		case lead && ch == '0':
			zeros++
		default:
			lead = false
			digits++
		}
	}
	// zeros counts the integer part's 0 and the fraction's leading zeros.
	return digits <= 15 && zeros <= 6
}

// compareUTF16 compares two names (valid UTF-8) by their UTF-16 code
// units, as JCS sorts members: as UTF-8 bytes, except that a character
// beyond U+FFFF sorts by its high surrogate (before U+E000..U+FFFF).
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < utf8.RuneSelf || b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	for i > 0 && a[i]&0xC0 == 0x80 {
		i-- // back to the start of the character that differs
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	if (ra > 0xFFFF) != (rb > 0xFFFF) {
		return int(utf16Unit(ra)) - int(utf16Unit(rb))
	}
	return int(ra) - int(rb)
}

// utf16Unit is the first UTF-16 code unit of r.
func utf16Unit(r rune) rune {
	if r > 0xFFFF {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}
