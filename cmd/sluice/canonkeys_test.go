package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// Reuse keyed on the request, not on how its JSON is spelled (issue 21,
// item 2; docs/money.md, "Never buying the same answer twice"), through
// the real binary against `sluice emulate`, on SQLite and PostgreSQL.

// canonTestLines are n chat requests as Go's encoding/json writes them
// (HTML characters and U+2028 escaped, the rest raw UTF-8), each body
// unique, with text that JSON can spell several ways and a seed beyond
// 2^53.
func canonTestLines(n int) []string {
	texts := []string{"café <b>bold</b> & co", "人工智能正在改变世界 😀", "tab\there \"quoted\" back\\slash", "line\u2028sep\nnew line", "Zürich, naïve, Ωmega"}
	var lines []string
	for i := 0; i < n; i++ {
		text, _ := json.Marshal(fmt.Sprintf("%s #%d", texts[i%len(texts)], i))
		sys, _ := json.Marshal("You answer in <= 20 words.")
		lines = append(lines, fmt.Sprintf(`{"custom_id":"a-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":%s},{"role":"user","content":%s}],"max_tokens":20,"temperature":0.7,"seed":%d}}`,
			i, sys, text, uint64(1)<<53+uint64(2*i+1)))
	}
	return lines
}

// pyDumps rewrites a line as Python's json.dumps writes it with its
// defaults (ensure_ascii, ", " and ": " separators), after a json.loads
// into dicts whose keys were then shuffled, and gives it custom_id id.
func pyDumps(t *testing.T, line, id string, rng *rand.Rand) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	v, err := orderedValue(dec)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	top := v.(orderedObject)
	for i := range top {
		if top[i].key == "custom_id" {
			top[i].value = id
		}
	}
	var b strings.Builder
	writePython(&b, top, rng)
	return b.String()
}

type orderedObject []struct {
	key   string
	value any
}

// orderedValue decodes one value keeping its members' order.
func orderedValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := tok.(type) {
	case json.Delim:
		if d == '[' {
			var a []any
			for dec.More() {
				v, err := orderedValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		var o orderedObject
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := orderedValue(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, struct {
				key   string
				value any
			}{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	}
	return tok, nil
}

func writePython(w io.StringWriter, v any, rng *rand.Rand) {
	switch v := v.(type) {
	case orderedObject:
		rng.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
		w.WriteString("{")
		for i, m := range v {
			if i > 0 {
				w.WriteString(", ")
			}
			writePython(w, m.key, rng)
			w.WriteString(": ")
			writePython(w, m.value, rng)
		}
		w.WriteString("}")
	case []any:
		w.WriteString("[")
		for i, e := range v {
			if i > 0 {
				w.WriteString(", ")
			}
			writePython(w, e, rng)
		}
		w.WriteString("]")
	case string:
		w.WriteString(pyString(v))
	case json.Number:
		w.WriteString(v.String())
	case bool:
		w.WriteString(fmt.Sprint(v))
	case nil:
		w.WriteString("null")
	}
}

// pyString is json.dumps(s) with ensure_ascii: everything outside
// printable ASCII as \uxxxx (characters beyond U+FFFF as surrogate pairs).
func pyString(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// canonRun runs in to out with extra in the environment; the run must
// exit 0.
type canonRun func(extra []string, in, out string) result

// onCanonBackends runs f, in parallel, on each tracker of canonBackends,
// with an emulator and state directory of its own (canonRunner).
func onCanonBackends(t *testing.T, f func(t *testing.T, emu *emulatorProc, dir string, run canonRun)) {
	for name, db := range canonBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			emu, dir, run := canonRunner(t, db)
			f(t, emu, dir, run)
		})
	}
}

// canonRunner starts an emulator and returns it, a state directory and
// run, which runs in to out there on the tracker db names
// (canonBackends) with extra in the environment, and must exit 0.
func canonRunner(t *testing.T, db []string) (*emulatorProc, string, canonRun) {
	t.Helper()
	emu := startEmulator(t)
	dir := t.TempDir()
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1", "SLUICE_DB=")
	return emu, dir, func(extra []string, in, out string) result {
		t.Helper()
		r := runSluice(t, append(env[:len(env):len(env)], extra...), append([]string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "100",
			"--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1"}, db...)...)
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", in, r.code, r.stderr)
		}
		return r
	}
}

// canonBackends are the trackers the tests run on: SQLite in the state
// directory, and a private PostgreSQL server.
func canonBackends(t *testing.T) map[string][]string {
	return map[string][]string{
		"sqlite":   nil,
		"postgres": {"--db", testsrv.Postgres(t)},
	}
}

// TestReuseKeyedOnCanonicalBody: a finished job of N requests, then the
// same requests under new custom_ids as Python's json.dumps rewrites them
// (escapes, separators, member order all changed): all N are answered
// from the first job's results, nothing bought again (the emulator's
// requests_processed does not move), answers byte for byte; a request
// differing only in a seed beyond 2^53 (2^53 against 2^53+1) is bought.
func TestReuseKeyedOnCanonicalBody(t *testing.T) {
	t.Parallel()
	onCanonBackends(t, func(t *testing.T, emu *emulatorProc, dir string, run canonRun) {
		processed := func() int64 { return emu.stats(t)["requests_processed"] }
		const n = 300
		a := canonTestLines(n)
		rng := rand.New(rand.NewSource(21))
		var b, bIDs []string
		for i := n - 1; i >= 0; i-- {
			id := fmt.Sprintf("py-%d", i)
			b, bIDs = append(b, pyDumps(t, a[i], id, rng)), append(bIDs, id)
		}
		// a-0's seed is 2^53+1; the same request with seed 2^53 is another.
		seed := strings.Replace(a[0], `"seed":9007199254740993`, `"seed":9007199254740992`, 1)
		if seed == a[0] {
			t.Fatal("the seed of a-0 is not 2^53+1")
		}
		b, bIDs = append(b, pyDumps(t, seed, "py-seed", rng)), append(bIDs, "py-seed")
		aIn, bIn := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
		writeLines(t, aIn, a)
		writeLines(t, bIn, b)
		aOut, bOut := filepath.Join(dir, "a.out.jsonl"), filepath.Join(dir, "b.out.jsonl")
		run(nil, aIn, aOut)
		if got := processed(); got != n {
			t.Fatalf("job a: %d requests processed, want %d", got, n)
		}
		r := run(nil, bIn, bOut)
		if got := processed() - n; got != 1 {
			t.Errorf("the rewritten job bought %d requests, want 1 (only the one with seed 2^53)", got)
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("reused: %d requests answered from earlier jobs' results", n)) {
			t.Errorf("summary does not say %d were reused:\n%s", n, r.stdout)
		}
		checkOutput(t, bOut, bIDs)
		ao, bo := outputByID(t, aOut), outputByID(t, bOut)
		for i := 0; i < n; i++ {
			if response(t, ao[fmt.Sprintf("a-%d", i)]) != response(t, bo[fmt.Sprintf("py-%d", i)]) {
				t.Fatalf("py-%d's answer is not a-%d's", i, i)
			}
		}
		if response(t, bo["py-seed"]) == response(t, ao["a-0"]) {
			t.Error("the request with seed 2^53 got the answer of the one with 2^53+1")
		}
	})
}

// TestReuseFromLegacyKeyLedger: answers bought by a job planned before
// ledger keys were canonical (SLUICE_PLAN_LEGACY_KEYS=1 plans as that
// sluice did: keys of the body's bytes without whitespace) are still
// reused by a job planned now, for every body that job would have reused
// then (the same bytes up to whitespace): none bought again.
func TestReuseFromLegacyKeyLedger(t *testing.T) {
	t.Parallel()
	onCanonBackends(t, func(t *testing.T, emu *emulatorProc, dir string, run canonRun) {
		const n = 200
		a := canonTestLines(n)
		// One body already in canonical form: its key is the same either way.
		a = append(a, `{"custom_id":"a-canonical","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"content":"hi","role":"user"}],"model":"gpt-4o-mini"}}`)
		var b, bIDs []string
		for _, l := range a {
			old := idOf(t, l)
			id := strings.Replace(old, "a-", "b-", 1)
			l = strings.Replace(l, `"custom_id":"`+old+`"`, `"custom_id": "`+id+`"`, 1)
			l = strings.Replace(l, `"model":"gpt-4o-mini"`, `"model" : "gpt-4o-mini"`, 1) // whitespace only
			b, bIDs = append(b, l), append(bIDs, id)
		}
		aIn, bIn := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
		writeLines(t, aIn, a)
		writeLines(t, bIn, b)
		run([]string{"SLUICE_PLAN_LEGACY_KEYS=1"}, aIn, filepath.Join(dir, "a.out.jsonl"))
		before := emu.stats(t)["requests_processed"]
		r := run(nil, bIn, filepath.Join(dir, "b.out.jsonl"))
		if got := emu.stats(t)["requests_processed"] - before; got != 0 {
			t.Errorf("the job planned now bought %d requests answered under legacy keys, want 0", got)
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("reused: %d requests answered from earlier jobs' results", len(a))) {
			t.Errorf("summary does not say %d were reused:\n%s", len(a), r.stdout)
		}
		checkOutput(t, filepath.Join(dir, "b.out.jsonl"), bIDs)
	})
}

func idOf(t *testing.T, line string) string {
	t.Helper()
	var o struct {
		CustomID string `json:"custom_id"`
	}
	if err := json.Unmarshal([]byte(line), &o); err != nil {
		t.Fatal(err)
	}
	return o.CustomID
}
