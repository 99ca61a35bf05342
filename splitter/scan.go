package splitter

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// Why a hand-written scanner rather than gjson or encoding/json:
//
// encoding/json is far too slow for the target (it decodes). gjson is fast
// but would need about five passes over each line (ValidBytes, a utf8.Valid
// pass since ValidBytes does not check UTF-8, ForEach over the line, over
// the body for body.model, and another walk to estimate tokens), it reports
// no position or cause for an invalid line, and its Get returns the first
// of duplicate keys where encoding/json (and most providers) take the last.
// This scanner does all of it in one pass: it validates the JSON grammar of
// RFC 8259 exactly as encoding/json.Valid does (same nesting limit), checks
// UTF-8 inside strings, locates custom_id, method, url, body and body.model
// (rejecting duplicates of those keys), and counts the text of body strings
// for the token estimate. Strings are skipped eight bytes at a time (SWAR).
// BenchmarkScanLine vs BenchmarkGJSON measure both. FuzzValidateLine checks
// it against encoding/json.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// field is the span of a value in the line; typ is its first byte ('"',
// '{', '[', 't', 'f', 'n', or a number's first byte), 0 when absent.
type field struct {
	start, end int
	typ        byte
	esc        bool // a string with escapes
	spaced     bool // whitespace between the tokens of the value (body only)
}

// Object kinds the scanner knows: the line itself, its body, anything else.
const (
	kindOther = iota
	kindLine
	kindBody
	kindGenConfig // body.generationConfig (Gemini)
)

// Keys of the line the scanner captures.
const (
	keyNone = iota
	keyCustomID
	keyMethod
	keyURL
	keyBody
	keyModel // body.model
)

var keyNames = [...]string{"", "custom_id", "method", "url", "body", "body.model"}

// scanner validates one line and captures its fields.
type scanner struct {
	b      []byte
	i      int
	depth  int
	err    string
	fields [6]field

	// Text counts of body strings (see estimate.go).
	count bool
	text  textCounts
	roles int64

	// spaces counts the whitespace bytes between tokens so far.
	spaces int

	// maxOut is the largest of body.max_tokens, body.max_completion_tokens,
	// body.max_output_tokens and Gemini's
	// body.generationConfig.maxOutputTokens, -1 when the body sets none
	// (the upper bound of the request's output: docs/money.md).
	maxOut int64
	// choices is the largest of body.n, body.best_of and Gemini's
	// body.generationConfig.candidateCount (0 when none is set): the
	// answers the request is billed for, each up to maxOut tokens.
	choices int64

	// cn, when set (ledger keys wanted), records the body for its
	// canonical form (canon.go) while rec: inside the body.
	cn  *canonRec
	rec bool
}

// outputBound is the bound of the request's output: maxOut for each of
// its choices, -1 when the body sets no maxOut.
func (s *scanner) outputBound() int64 {
	if s.maxOut < 0 || s.choices <= 1 {
		return s.maxOut
	}
	return saturatedProduct(s.maxOut, s.choices)
}

// saturatedProduct is a*b for non-negative counts, at most 1e15.
func saturatedProduct(a, b int64) int64 {
	if b != 0 && a > 1e15/b {
		return 1e15
	}
	return a * b
}

func (s *scanner) reset(b []byte) {
	cn := s.cn
	*s = scanner{b: b, maxOut: -1, cn: cn}
	if cn != nil {
		cn.reset(b)
	}
}

func (s *scanner) fail(format string, args ...any) bool {
	if s.err == "" {
		s.err = fmt.Sprintf(format, args...)
	}
	return false
}

// truncated is the failure for a line that ends inside a value.
func (s *scanner) truncated() bool {
	return s.fail("truncated JSON: the line ends before the JSON value is complete")
}

// unexpected fails on the byte at i.
func (s *scanner) unexpected(i int) bool {
	if i >= len(s.b) {
		return s.truncated()
	}
	c := s.b[i]
	if c < utf8.RuneSelf {
		return s.fail("invalid JSON at column %d: unexpected character %q", i+1, rune(c))
	}
	r, n := utf8.DecodeRune(s.b[i:])
	if r == utf8.RuneError && n == 1 {
		return s.fail("invalid UTF-8 at column %d", i+1)
	}
	return s.fail("invalid JSON at column %d: unexpected character %q", i+1, r)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
			s.spaces++
		default:
			return
		}
	}
}

// line scans a whole line. blank reports a line of whitespace only.
func (s *scanner) line() (blank, ok bool) {
	s.ws()
	if s.i == len(s.b) {
		return true, true
	}
	if s.b[s.i] == '{' {
		ok = s.object(kindLine)
	} else {
		start := s.i
		if ok = s.value(); ok {
			s.ws()
			if s.i < len(s.b) {
				return false, s.fail("unexpected data after the JSON value at column %d", s.i+1)
			}
			return false, s.fail("line is not a JSON object (got %s)", typeName(s.b[start]))
		}
	}
	if !ok {
		return false, false
	}
	s.ws()
	if s.i < len(s.b) {
		return false, s.fail("unexpected data after the JSON object at column %d", s.i+1)
	}
	return false, true
}

func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return s.truncated()
	}
	switch c := s.b[s.i]; c {
	case '{':
		return s.object(kindOther)
	case '[':
		return s.array()
	case '"':
		_, ok := s.str(s.count)
		return ok
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return s.number()
		}
		return s.unexpected(s.i)
	}
}

func (s *scanner) lit(w string) bool {
	for k := 0; k < len(w); k++ {
		if s.i+k >= len(s.b) {
			return s.truncated()
		}
		if s.b[s.i+k] != w[k] {
			return s.badLiteral()
		}
	}
	s.i += len(w)
	return true
}

// badLiteral fails on a bare word at s.i that starts like true, false or
// null but is none of them ("this", "nope"): the column is the word's
// first, where the mistake is, not the first byte that differs.
func (s *scanner) badLiteral() bool {
	end := s.i
	for end < len(s.b) && end-s.i < 20 && (s.b[end] >= 'a' && s.b[end] <= 'z' || s.b[end] >= 'A' && s.b[end] <= 'Z') {
		end++
	}
	return s.fail("invalid JSON at column %d: invalid literal %q (want true, false, null, a number, a string, an array or an object)", s.i+1, string(s.b[s.i:end]))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scanner) number() bool {
	b, i := s.b, s.i
	var frac, exp bool
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return s.truncated()
	}
	switch {
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return s.unexpected(i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		frac = true
		if i >= len(b) {
			return s.truncated()
		}
		if !isDigit(b[i]) {
			return s.unexpected(i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		exp = true
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return s.truncated()
		}
		if !isDigit(b[i]) {
			return s.unexpected(i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if s.rec && !canonicalNumber(b[s.i:i], frac, exp) {
		s.cn.fix(s.i, i, true)
	}
	s.i = i
	return true
}

func (s *scanner) enter() bool {
	s.depth++
	if s.depth > maxDepth {
		return s.fail("invalid JSON at column %d: nesting deeper than %d levels", s.i+1, maxDepth)
	}
	return true
}

func (s *scanner) array() bool {
	if !s.enter() {
		return false
	}
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.value() {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.truncated()
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			s.depth--
			return true
		default:
			return s.unexpected(s.i)
		}
	}
}

func (s *scanner) object(kind int) bool {
	if !s.enter() {
		return false
	}
	// Recorded for the canonical form of the body (canon.go).
	cn := s.cn
	if !s.rec {
		cn = nil
	}
	var oi, base int
	var keep bool
	if cn != nil {
		oi, base, keep = cn.open(s.i), len(cn.stack), cn.keep
		cn.keep = false
	}
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		if cn != nil {
			cn.close(oi, base, s.i)
		}
		return true
	}
	for {
		if s.i >= len(s.b) {
			return s.truncated()
		}
		if s.b[s.i] != '"' {
			return s.unexpected(s.i)
		}
		ks := s.i
		var f0 int
		if cn != nil {
			f0 = len(cn.fixes)
		}
		esc, ok := s.str(false)
		if !ok {
			return false
		}
		key := s.b[ks+1 : s.i-1]
		if esc {
			key = unescapeKey(key)
		}
		if cn != nil {
			cn.member(oi, base, key, esc, ks, f0, keep)
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.truncated()
		}
		if s.b[s.i] != ':' {
			return s.unexpected(s.i)
		}
		s.i++
		s.ws()
		if s.i >= len(s.b) {
			return s.truncated()
		}
		if cn != nil && s.b[s.i] == '{' && string(key) == "properties" {
			cn.keep = true // a JSON schema's properties keep their order
		}
		if !s.member(kind, key) {
			return false
		}
		if cn != nil {
			cn.valueEnd(s.i)
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.truncated()
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			s.depth--
			if cn != nil {
				cn.close(oi, base, s.i)
			}
			return true
		default:
			return s.unexpected(s.i)
		}
	}
}

// member scans the value of key (decoded) in an object of the given kind.
func (s *scanner) member(kind int, key []byte) bool {
	which := keyNone
	switch kind {
	case kindLine:
		switch string(key) {
		case "custom_id":
			which = keyCustomID
		case "method":
			which = keyMethod
		case "url":
			which = keyURL
		case "body":
			which = keyBody
		}
	case kindBody:
		switch string(key) {
		case "model":
			which = keyModel
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			return s.maxOutput()
		case "n", "best_of":
			return s.choiceCount()
		case "generationConfig", "generation_config":
			if s.b[s.i] == '{' {
				return s.object(kindGenConfig)
			}
		}
	case kindGenConfig:
		// Gemini's JSON takes a field by its proto name or its JSON name.
		switch string(key) {
		case "maxOutputTokens", "max_output_tokens":
			return s.maxOutput()
		case "candidateCount", "candidate_count":
			return s.choiceCount()
		}
	}
	if which == keyNone {
		if !s.count {
			return s.value()
		}
		// Inside body: count text, but not of keys that hold no prose.
		if excludedKey(key) {
			if string(key) == "role" {
				s.roles++
			}
			if s.b[s.i] == '"' {
				_, ok := s.str(false)
				return ok
			}
		}
		return s.value()
	}
	f := &s.fields[which]
	if f.typ != 0 {
		return s.fail("duplicate key %q", keyNames[which])
	}
	f.start, f.typ = s.i, s.b[s.i]
	var ok bool
	switch {
	case which == keyBody && f.typ == '{':
		s.count, s.rec = true, s.cn != nil
		sp := s.spaces
		ok = s.object(kindBody)
		f.spaced = s.spaces != sp
		s.count, s.rec = false, false
	case f.typ == '"':
		f.esc, ok = s.str(false)
	default:
		ok = s.value()
	}
	f.end = s.i
	return ok
}

// maxOutput scans a value that bounds the request's output and keeps it
// when it is the largest such count so far.
func (s *scanner) maxOutput() bool {
	start := s.i
	if !s.value() {
		return false
	}
	if n, ok := parseCount(s.b[start:s.i]); ok && n > s.maxOut {
		s.maxOut = n
	}
	return true
}

// choiceCount scans a value that counts the answers of the request and
// keeps it when it is the largest such count so far.
func (s *scanner) choiceCount() bool {
	start := s.i
	if !s.value() {
		return false
	}
	if n, ok := parseCount(s.b[start:s.i]); ok && n > s.choices {
		s.choices = n
	}
	return true
}

// unescapeKey decodes a key with escapes (rare: slow path).
func unescapeKey(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var k string
	if json.Unmarshal(q, &k) != nil {
		return raw
	}
	return []byte(k)
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// special flags, in each byte's high bit, the bytes a string scan must
// stop at: '"', '\\', control characters and non-ASCII bytes. The lowest
// flag is exact (borrows only run upward).
func special(x uint64) uint64 {
	q := x ^ (lo8 * '"')
	bs := x ^ (lo8 * '\\')
	return ((x-lo8*0x20)&^x | (q-lo8)&^q | (bs-lo8)&^bs | x) & hi8
}

// str scans a string at s.b[s.i] == '"', leaving s.i past its closing
// quote. With count it adds its text to the scanner's counts. esc reports
// escapes in it.
func (s *scanner) str(count bool) (esc, ok bool) {
	b := s.b
	i := s.i + 1
	start := i
	var t textCounts // counted text, when count
	var st strStats
	for {
		if count {
			for i+8 <= len(b) {
				x := binary.LittleEndian.Uint64(b[i:])
				if m := special(x); m != 0 {
					k := bits.TrailingZeros64(m) >> 3
					t.addWord(x & (1<<(8*k) - 1)) // zero bytes count as nothing
					i += k
					break
				}
				t.addWord(x)
				i += 8
			}
		} else {
			for i+8 <= len(b) {
				if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
				i += 8
			}
		}
		if i >= len(b) {
			return esc, s.truncated()
		}
		c := b[i]
		switch {
		case c == '"':
			if count {
				// What is neither a letter nor a space among the ASCII
				// characters (an escape is one) is "other".
				t.other += int64(i-start-st.nonASCII-st.escExtra) - t.letters - t.spaces
				s.text.add(&t)
			}
			if st.fix && s.rec {
				s.cn.fix(s.i, i+1, false)
			}
			s.i = i + 1
			return esc, true
		case c == '\\':
			esc = true
			if i, ok = s.escape(i, count, &t, &st); !ok {
				return esc, false
			}
		case c < 0x20:
			return esc, s.fail("control character %U in a string at column %d (must be escaped)", rune(c), i+1)
		case c < utf8.RuneSelf:
			if count {
				t.addByte(c)
			}
			i++
		default:
			n := utf8Len(b[i:])
			if n == 0 {
				return esc, s.fail("invalid UTF-8 at column %d", i+1)
			}
			st.nonASCII += n
			if count {
				t.addRune(c, n)
			}
			i += n
		}
	}
}

// strStats is what a string's escapes and non-ASCII characters add up to,
// for its counts and its canonical form.
type strStats struct {
	nonASCII int  // bytes of non-ASCII characters, and of escapes that stand for one
	escExtra int  // bytes of escapes beyond the ASCII character each stands for
	fix      bool // an escape the canonical form writes otherwise
}

// escape reads the escape sequence at s.b[i] == '\\' in a string, adds it
// to st (and, with count, to t) and returns the index past it; false when
// it is invalid or cut short (the scanner's error set).
func (s *scanner) escape(i int, count bool, t *textCounts, st *strStats) (int, bool) {
	b := s.b
	if i+1 >= len(b) {
		return i, s.truncated()
	}
	switch b[i+1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		st.escExtra++
		return i + 2, true
	case '/':
		st.escExtra++
		st.fix = true
		return i + 2, true
	case 'u':
	default:
		return i, s.fail("invalid JSON at column %d: invalid escape sequence %q in a string", i+1, string(b[i:i+2]))
	}
	var v rune
	for k := 2; k < 6; k++ {
		if i+k >= len(b) {
			return i, s.truncated()
		}
		h := hexVal(b[i+k])
		if h < 0 {
			return i, s.fail("invalid JSON at column %d: invalid escape sequence in a string", i+1)
		}
		v = v<<4 | rune(h)
	}
	if v >= 0x20 || !canonicalControl(v, b[i+4], b[i+5]) {
		st.fix = true
	}
	if v < utf8.RuneSelf {
		st.escExtra += 5
		return i + 6, true
	}
	// Counted as the character it stands for, not as ASCII.
	st.nonASCII += 6
	switch {
	case !count:
	case v >= 0xD800 && v < 0xDC00: // a surrogate pair's first half: the pair is one character
		t.astral++
	case v >= 0xDC00 && v < 0xE000: // its second half
	default:
		var e [4]byte
		n := utf8.EncodeRune(e[:], v)
		t.addRune(e[0], n)
	}
	return i + 6, true
}

// utf8Len returns the length of the valid UTF-8 sequence starting b (whose
// first byte is not ASCII), or 0. Two- and three-byte sequences (accents,
// CJK) are checked inline; the rest goes to package utf8.
func utf8Len(b []byte) int {
	c := b[0]
	switch {
	case c >= 0xC2 && c < 0xE0:
		if len(b) > 1 && b[1]&0xC0 == 0x80 {
			return 2
		}
		return 0
	case c >= 0xE1 && c < 0xF0 && c != 0xED:
		if len(b) > 2 && b[1]&0xC0 == 0x80 && b[2]&0xC0 == 0x80 {
			return 3
		}
		return 0
	}
	r, n := utf8.DecodeRune(b)
	if r == utf8.RuneError && n == 1 {
		return 0
	}
	return n
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// typeName names the JSON type of a value by its first byte.
func typeName(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// parseCount reads a JSON number that is a non-negative integer (1e3 and
// 100.0 included), as a token count.
func parseCount(v []byte) (int64, bool) {
	var n int64
	for i, c := range v {
		if c < '0' || c > '9' {
			if i == 0 {
				return 0, false
			}
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil || f < 0 || f > 1e15 {
				return 0, false
			}
			return int64(math.Ceil(f)), true
		}
		if n > 1e15 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, len(v) > 0
}
