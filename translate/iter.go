package translate

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// A request is read with these iterators rather than gjson's ForEach,
// which decodes every string value as it goes, a cost that dominated
// translation (BenchmarkRequest): here a string without escapes is a
// slice of the input, and one with escapes is decoded by copying the runs
// between them. They assume valid JSON (Request checks it first; the
// splitter's scanner has checked every line it hands on).

// members calls fn for each member of the object raw, in order, until fn
// returns false.
func members(raw string, fn func(key string, v gjson.Result) bool) {
	membersAt(raw, skipWS(raw, 0), func(key string, at int) (int, bool) {
		v, end := value(raw, at)
		return end, fn(key, v)
	})
}

// membersAt walks the object starting at raw[i]: fn gets each key and the
// index of its value and returns the index just past the value (read with
// value, or by a parser of its own, so a big value is read once) and
// whether to go on. It returns the index past the object.
func membersAt(raw string, i int, fn func(key string, at int) (int, bool)) int {
	if i >= len(raw) || raw[i] != '{' {
		return i
	}
	i++
	for {
		i = skipWS(raw, i)
		if i >= len(raw) {
			return i
		}
		if raw[i] == '}' {
			return i + 1
		}
		if raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
		if i >= len(raw) || raw[i] != '"' {
			return i
		}
		kend := skipString(raw, i)
		key := unquote(raw[i:kend])
		i = skipWS(raw, kend)
		if i >= len(raw) || raw[i] != ':' {
			return i
		}
		end, ok := fn(key, skipWS(raw, i+1))
		if !ok {
			return end
		}
		i = end
	}
}

// elements calls fn for each element of the array raw, in order, until
// fn returns false.
func elements(raw string, fn func(v gjson.Result) bool) {
	elementsAt(raw, skipWS(raw, 0), func(at int) (int, bool) {
		v, end := value(raw, at)
		return end, fn(v)
	})
}

// elementsAt walks the array starting at raw[i] as membersAt walks an
// object.
func elementsAt(raw string, i int, fn func(at int) (int, bool)) int {
	if i >= len(raw) || raw[i] != '[' {
		return i
	}
	i++
	for {
		i = skipWS(raw, i)
		if i >= len(raw) {
			return i
		}
		if raw[i] == ']' {
			return i + 1
		}
		if raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
		if i >= len(raw) {
			return i
		}
		end, ok := fn(i)
		if !ok {
			return end
		}
		i = end
	}
}

// value reads the value starting at raw[i] and returns it with its end.
func value(raw string, i int) (gjson.Result, int) {
	if i >= len(raw) {
		return gjson.Result{}, i
	}
	switch c := raw[i]; c {
	case '"':
		end := skipString(raw, i)
		lit := raw[i:end]
		if len(lit) > lazyLen && strings.IndexByte(lit, '\\') >= 0 {
			// Long text with escapes (message content, mostly) is copied
			// as written; decoded only if asked (text).
			return gjson.Result{Type: gjson.String, Raw: lit, Index: lazy}, end
		}
		return gjson.Result{Type: gjson.String, Raw: lit, Str: unquote(lit)}, end
	case '{', '[':
		end := skipComposite(raw, i)
		return gjson.Result{Type: gjson.JSON, Raw: raw[i:end]}, end
	case 't':
		return gjson.Result{Type: gjson.True, Raw: raw[i:min(i+4, len(raw))]}, min(i+4, len(raw))
	case 'f':
		return gjson.Result{Type: gjson.False, Raw: raw[i:min(i+5, len(raw))]}, min(i+5, len(raw))
	case 'n':
		return gjson.Result{Type: gjson.Null, Raw: raw[i:min(i+4, len(raw))]}, min(i+4, len(raw))
	default:
		j := i
		for j < len(raw) {
			switch raw[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				goto done
			}
			j++
		}
	done:
		n, _ := strconv.ParseFloat(raw[i:j], 64)
		return gjson.Result{Type: gjson.Number, Raw: raw[i:j], Num: n}, j
	}
}

// Strings longer than lazyLen with escapes are left undecoded: their
// Result has Index lazy and an empty Str.
const (
	lazyLen = 128
	lazy    = -1
)

// text is the decoded value of a string Result read by the iterators.
func text(r gjson.Result) string {
	if r.Type == gjson.String && r.Index == lazy {
		return unquote(r.Raw)
	}
	return r.String()
}

// isEmpty reports whether a string Result is "".
func isEmpty(r gjson.Result) bool { return r.Raw == `""` || r.Type != gjson.String }

func skipWS(raw string, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the end of the string starting at raw[i] (its
// opening quote), just past the closing quote.
func skipString(raw string, i int) int {
	j := i + 1
	for {
		k := strings.IndexByte(raw[j:], '"')
		if k < 0 {
			return len(raw)
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for b := j - 1; b > i && raw[b] == '\\'; b-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
}

// skipComposite returns the end of the object or array starting at raw[i].
func skipComposite(raw string, i int) int {
	depth := 0
	for j := i; j < len(raw); j++ {
		switch raw[j] {
		case '"':
			j = skipString(raw, j) - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(raw)
}

// unquote decodes a JSON string literal (quotes included).
func unquote(lit string) string {
	if len(lit) < 2 {
		return ""
	}
	s := lit[1 : len(lit)-1]
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
loop:
	for {
		b = append(b, s[:i]...)
		s = s[i:]
		if len(s) < 2 {
			break
		}
		switch c := s[1]; c {
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case 'r':
			b = append(b, '\r')
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'u':
			if len(s) < 6 {
				break loop
			}
			r := hex4(s[2:6])
			s = s[4:] // with the s[2:] below, past \uXXXX
			if utf16.IsSurrogate(r) && len(s) >= 8 && s[2] == '\\' && s[3] == 'u' {
				if r2 := utf16.DecodeRune(r, hex4(s[4:8])); r2 != utf8.RuneError {
					r, s = r2, s[6:]
				}
			}
			b = utf8.AppendRune(b, r)
		default: // '"', '\\', '/'
			b = append(b, c)
		}
		s = s[2:]
		i = strings.IndexByte(s, '\\')
		if i < 0 {
			b = append(b, s...)
			break
		}
	}
	return string(b)
}

func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}
