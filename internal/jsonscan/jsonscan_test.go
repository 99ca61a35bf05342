package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

var seeds = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e10`, `-1E-2`, `true`, `false`, `null`,
	` {"a" : [1, 2, {"b":null}] } `, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
	`"\u00e9\n\"\\/"`, `"\x"`, `"\u12G4"`, "\"a\tb\"", `"<a&b>"`, "\"\u2028\"", "\"\u2029x\"", "\"\xe2\x82\xac\"",
	"\"\xff\"", `{"a":"b"}x`, `{"a" "b"}`, `{"a":}`, `[`, `{`, `"`, `nul`, `truex`, `[1 2]`,
	`{"custom_id":"r-1","response":{"status_code":200,"request_id":"q","body":{"usage":{"prompt_tokens":3}}},"error":null}`,
	strings.Repeat("[", 999) + strings.Repeat("]", 999),
	strings.Repeat("[", 1001) + strings.Repeat("]", 1001),
}

// canonical is the definition Canonical implements, by encoding/json.
func canonical(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	out, err := json.Marshal(json.RawMessage(b))
	return err == nil && bytes.Equal(out, b)
}

func TestAgainstEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		b := []byte(s)
		if Valid(b) && !json.Valid(b) {
			t.Errorf("Valid(%q) = true, encoding/json says invalid", s)
		}
		if json.Valid(b) && !Valid(b) && !strings.HasPrefix(s, "[[[[") {
			t.Errorf("Valid(%q) = false, encoding/json says valid", s)
		}
		if got, want := Canonical(b), canonical(b); got != want && (got || !strings.HasPrefix(s, "[[[[")) {
			t.Errorf("Canonical(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzAgainstEncodingJSON: Valid and Canonical never say true where
// encoding/json disagrees, and Valid agrees with json.Valid on inputs
// within its depth bound.
func FuzzAgainstEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, jv := Valid(b), json.Valid(b)
		if v && !jv {
			t.Fatalf("Valid(%q) = true, encoding/json says invalid", b)
		}
		if jv && !v && bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) <= maxDepth {
			t.Fatalf("Valid(%q) = false, encoding/json says valid", b)
		}
		c, jc := Canonical(b), canonical(b)
		if c && !jc {
			t.Fatalf("Canonical(%q) = true, encoding/json rewrites it", b)
		}
		if jc && !c && bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) <= maxDepth {
			t.Fatalf("Canonical(%q) = false, encoding/json keeps it as is", b)
		}
		isObj := Object(b, func(k, v []byte) bool { return true })
		if isObj && !jv {
			t.Fatalf("Object(%q) = true, encoding/json says invalid", b)
		}
		if v && !isObj && bytes.TrimSpace(b)[0] == '{' {
			t.Fatalf("Object(%q) = false, Valid says true", b)
		}
		if v {
			var members, objMembers []string
			Object(b, func(k, val []byte) bool {
				objMembers = append(objMembers, string(k)+"="+string(val))
				return true
			})
			if Members(b, func(k, val []byte) bool {
				members = append(members, string(k)+"="+string(val))
				return true
			}) {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatalf("Members walked %q, which is no object: %v", b, err)
				}
				for _, kv := range members {
					k, val, _ := strings.Cut(kv, "=")
					if strings.Contains(k, `\`) {
						continue
					}
					if !json.Valid([]byte(val)) {
						t.Fatalf("Members(%q): member %q has the invalid value %q", b, k, val)
					}
				}
				if strings.Join(members, "\x00") != strings.Join(objMembers, "\x00") {
					t.Fatalf("Members(%q) = %q, Object found %q", b, members, objMembers)
				}
				if len(members) < len(m) {
					t.Fatalf("Members(%q) found %d members, encoding/json %d", b, len(members), len(m))
				}
			}
		}
		s := string(b)
		js, _ := json.Marshal(s)
		if PlainString(s) != (string(js) == `"`+s+`"`) {
			t.Fatalf("PlainString(%q) = %v, json.Marshal gives %s", s, PlainString(s), js)
		}
	})
}

func TestMembers(t *testing.T) {
	var got []string
	Members([]byte(` { "a" : [1, {"x":"}"}] , "b\"c":"d" ,"e":null}`), func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	})
	if want := `a=[1, {"x":"}"}]|b\"c="d"|e=null`; strings.Join(got, "|") != want {
		t.Errorf("Members: %s, want %s", strings.Join(got, "|"), want)
	}
	if Members([]byte(`[1]`), func(k, v []byte) bool { return true }) {
		t.Error("Members walked an array")
	}
}

// benchLine is a result line of the emulator's chat completions.
var benchLine = []byte(`{"id":"batch_req_0123456789abcdef01234567","custom_id":"req-0","response":{"status_code":200,"request_id":"req_83734086b7d42d9cecae18860261936b","body":{"id":"chatcmpl-49ac829d9af37f932a265a2d","object":"chat.completion","created":1795420250,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"echo: t nialpxe atad ni esualc hcihw noitpecxe","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":148,"completion_tokens":12,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_emulator"}},"error":null}`)

func BenchmarkValid(b *testing.B) {
	for _, bc := range []struct {
		name string
		fn   func([]byte) bool
	}{{"json.Valid", json.Valid}, {"Valid", Valid}, {"Canonical", Canonical},
		{"Walk", func(b []byte) bool { return Walk(b, 4, func(int, []byte, []byte, bool) bool { return true }) }}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(benchLine)))
			for b.Loop() {
				if !bc.fn(benchLine) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// walkRef is Walk by Members and Canonical, for a valid object b: the
// members it reports, in its order, as "path=val canonical".
func walkRef(b []byte, levels int, path []string, out *[]string) {
	Members(b, func(k, v []byte) bool {
		p := append(path[:len(path):len(path)], string(k))
		if v[0] == '{' && len(p) < levels {
			walkRef(v, levels, p, out)
		}
		*out = append(*out, fmt.Sprintf("%s=%s %v", strings.Join(p, "/"), v, Canonical(v)))
		return true
	})
}

func walkGot(b []byte, levels int) (bool, []string) {
	var got []string
	var path [MaxPath]string
	ok := Walk(b, levels, func(depth int, key, v []byte, canonical bool) bool {
		path[depth-1] = string(key)
		if v == nil {
			if depth >= min(levels, MaxPath) {
				panic("entered an object below the levels asked for")
			}
			return true
		}
		got = append(got, fmt.Sprintf("%s=%s %v", strings.Join(path[:depth], "/"), v, canonical))
		return true
	})
	return ok, got
}

var walkSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":{"b":{"c":{"d":{"e":1}}}}}`, `{"a":[{"b":1}],"c":{"d":[]}}`,
	`{"a" : { "b" : 1 } , "c":{"d":2}}`, `{"a":"<&>","b":{"c":"x\u2028y"},"d":{"e":"` + "\u2028" + `"}}`,
	`{"a\"b":{"c\\":1}}`, `{"a":{"a":{"a":1},"a":2}}`, `{"a":1,}`, `{"a":{"b":1}`, `[{"a":1}]`, `"x"`,
	`{"a":{"b":{}}} x`, `{"k":"` + "\xff" + `","n":{"m":-0.5e+3}}`,
	`{"id":"b","custom_id":"r","response":{"status_code":200,"body":{"choices":[{"x":{"y":1}}],"usage":{"prompt_tokens":1}}},"error":null}`,
	`{"a":` + strings.Repeat("[", 998) + strings.Repeat("]", 998) + `}`,
	`{"a":` + strings.Repeat(`{"a":`, 1000) + `1` + strings.Repeat("}", 1000) + `}`,
}

// TestWalk: Walk agrees with Valid on objects and reports what Members and
// Canonical find, member by member, in post-order.
func TestWalk(t *testing.T) {
	for _, s := range walkSeeds {
		for levels := 0; levels <= MaxPath+1; levels++ {
			checkWalk(t, []byte(s), levels)
		}
	}
	ok, got := walkGot([]byte(` {"a" :{"b":{"c": 1}}, "d":"<"}`), 2)
	want := []string{`a/b={"c": 1} false`, `a={"b":{"c": 1}} false`, `d="<" false`}
	if !ok || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Walk: %v %q, want %q", ok, got, want)
	}
	n := 0
	if Walk([]byte(`{"a":1,"b":2}`), 1, func(int, []byte, []byte, bool) bool { n++; return false }) || n != 1 {
		t.Errorf("a false from fn did not stop Walk (%d calls)", n)
	}
}

func checkWalk(t *testing.T, b []byte, levels int) {
	t.Helper()
	ok, got := walkGot(b, levels)
	trimmed := bytes.TrimSpace(b)
	isObj := Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
	if ok != (isObj && levels > 0) {
		t.Fatalf("Walk(%q, %d) = %v; Valid object: %v", b, levels, ok, isObj)
	}
	if !ok {
		return
	}
	var want []string
	walkRef(b, min(levels, MaxPath), nil, &want)
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("Walk(%q, %d):\n got %q\nwant %q", b, levels, got, want)
	}
}

func FuzzWalk(f *testing.F) {
	for _, s := range append(walkSeeds, seeds...) {
		f.Add([]byte(s), 4)
	}
	f.Fuzz(func(t *testing.T, b []byte, levels int) {
		checkWalk(t, b, levels%(MaxPath+2))
	})
}
