package splitter

import (
	"bytes"
	"io"
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

// canonMem is a member: its name (in the line, or decoded in
// canonRec.names when dec) and where the member's text is, with the first
// object and fix at or after it. No pointers: moved and copied cheaply.
type canonMem struct {
	n0, n1 int32
	ks, ve int32 // the name's opening quote; one past the value
	o0, f0 int32
	dec    bool
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
	names []byte // decoded names (of members with escapes)
	keep  bool   // the next object keeps its members' order
	dirty bool   // an object out of order or a fix: the body is not canonical

	l      []byte
	spaced bool
	w      io.Writer // where emit writes, through out
	out    []byte
	order  []int32
}

func (c *canonRec) reset(l []byte) {
	c.objs, c.mems, c.stack, c.fixes, c.names = c.objs[:0], c.mems[:0], c.stack[:0], c.fixes[:0], c.names[:0]
	c.keep, c.dirty, c.l = false, false, l
}

func (c *canonRec) name(m *canonMem) []byte {
	if m.dec {
		return c.names[m.n0:m.n1]
	}
	return c.l[m.n0:m.n1]
}

// open records an object starting at i; it returns its index.
func (c *canonRec) open(i int) int {
	c.objs = append(c.objs, canonObj{start: int32(i), f0: int32(len(c.fixes)), sorted: true})
	return len(c.objs) - 1
}

// member records a member whose name starts at ks (its quote; name is the
// name decoded when dec); base is the object's first member on the stack,
// f0 the fixes before its name.
func (c *canonRec) member(oi, base int, name []byte, dec bool, ks, f0 int, keep bool) {
	m := canonMem{n0: int32(ks + 1), n1: int32(ks + 1 + len(name)), ks: int32(ks), o0: int32(len(c.objs)), f0: int32(f0)}
	if dec {
		m.n0, m.dec = int32(len(c.names)), true
		c.names = append(c.names, name...)
		m.n1 = int32(len(c.names))
	}
	if !keep && len(c.stack) > base && compareUTF16(c.name(&c.stack[len(c.stack)-1]), name) > 0 {
		c.objs[oi].sorted = false
		c.dirty = true
	}
	c.stack = append(c.stack, m)
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

// emit writes to w prefix, then the canonical form of the body recorded
// from line l (the first object recorded); spaced tells that there is
// whitespace between its tokens. It returns false, having written part of
// it, when the body has no canonical form. Short pieces are gathered in
// c.out, long ones written as they are (a hash takes them without another
// copy), in whole blocks of a hash (SHA-256: 64 bytes) until the last
// write: each write is then hashed in one go.
func (c *canonRec) emit(w io.Writer, prefix, l []byte, spaced bool) bool {
	c.l, c.spaced, c.w, c.out = l, spaced, w, append(c.out[:0], prefix...)
	ok := c.object(0)
	if ok && len(c.out) > 0 {
		w.Write(c.out)
	}
	c.w = nil
	return ok
}

// directWrite is the length from which a piece is written as it is.
const directWrite = 128

const hashBlock = 64

func (c *canonRec) write(p []byte) {
	if len(p) < directWrite {
		c.out = append(c.out, p...)
		return
	}
	fill := (hashBlock - len(c.out)%hashBlock) % hashBlock
	c.out = append(c.out, p[:fill]...)
	p = p[fill:]
	c.w.Write(c.out)
	n := len(p) &^ (hashBlock - 1)
	c.w.Write(p[:n])
	c.out = append(c.out[:0], p[n:]...)
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
	c.sortMembers(ord)
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

// sortMembers sorts members by name, stably: by insertion when there are
// few (the usual object), else by merging.
func (c *canonRec) sortMembers(ord []int32) {
	cmp := func(a, b int32) int { return compareUTF16(c.name(&c.mems[a]), c.name(&c.mems[b])) }
	if len(ord) > 12 {
		slices.SortStableFunc(ord, cmp)
		return
	}
	for i := 1; i < len(ord); i++ {
		for j := i; j > 0 && cmp(ord[j], ord[j-1]) < 0; j-- {
			ord[j], ord[j-1] = ord[j-1], ord[j]
		}
	}
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
		c.write(c.l[a:b])
		return
	}
	inStr, esc := false, false
	run := a
	for i := a; i < b; i++ {
		ch := c.l[i]
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
			c.write(c.l[run:i])
			run = i + 1
		}
	}
	c.write(c.l[run:b])
}

func (c *canonRec) rewrite(tok []byte, num bool) bool {
	var ok bool
	if num {
		c.out, ok = appendCanonicalNumber(c.out, tok)
		return ok
	}
	// The runs between escapes as they are, the escapes resolved.
	s := tok[1 : len(tok)-1]
	c.out = append(c.out, '"')
	for len(s) > 0 {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			k = len(s)
		}
		c.write(s[:k])
		if s = s[k:]; len(s) == 0 {
			break
		}
		var n int
		if c.out, n = appendCanonicalEscape(c.out, s); n == 0 {
			return false
		}
		s = s[n:]
	}
	c.out = append(c.out, '"')
	return true
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

// appendCanonicalEscape appends the canonical text of the escape that
// starts e (valid JSON), a surrogate pair's two escapes together; n is how
// many bytes of e it took, 0 for a lone surrogate.
func appendCanonicalEscape(dst, e []byte) (out []byte, n int) {
	if e[1] != 'u' {
		return appendCanonicalRune(dst, rune(unescapeByte(e[1]))), 2
	}
	r := hex4(e[2:])
	switch {
	case r >= 0xDC00 && r < 0xE000:
		return dst, 0
	case r >= 0xD800 && r < 0xDC00:
		if len(e) < 12 || e[6] != '\\' || e[7] != 'u' {
			return dst, 0
		}
		lo := hex4(e[8:])
		if lo < 0xDC00 || lo >= 0xE000 {
			return dst, 0
		}
		return appendCanonicalRune(dst, 0x10000+(r-0xD800)<<10+(lo-0xDC00)), 12
	}
	return appendCanonicalRune(dst, r), 6
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

// canonicalControl reports whether \u00XY, the escape of the control
// character v < 0x20, is written so in canonical form: not one of those
// with a name (\n...), in lowercase (\u001f).
func canonicalControl(v rune, x, y byte) bool {
	switch v {
	case '\b', '\f', '\n', '\r', '\t':
		return false
	}
	return !upperHex(x) && !upperHex(y)
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
