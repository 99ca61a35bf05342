package wire

import (
	"encoding/json"
	"testing"

	"github.com/sluice-batch/sluice"
)

// FuzzAppendOutputLine: the direct encoding of an output line is
// json.Marshal's, byte for byte (and fails where it fails), whatever the
// custom_id, request id and body; the result record frames it as
// AppendResultRecord does.
func FuzzAppendOutputLine(f *testing.F) {
	f.Add("req-1", 200, "req_abc", []byte(`{"usage":{"prompt_tokens":3},"content":"a b"}`), false)
	f.Add("r<1>", 500, "", []byte(` {"a": 1} `), false)
	f.Add("r", 200, "x\u2028", []byte(`{"a":"<b>&\u2029"}`), false)
	f.Add("\xff", 200, "q", []byte(`"\u00e9"`), false)
	f.Add("r", 200, "q", []byte(`{"a":`), false)
	f.Add("r", 200, "q", []byte(``), false)
	f.Add("r", 0, "", []byte(`null`), true)
	f.Fuzz(func(t *testing.T, id string, status int, reqID string, body []byte, asError bool) {
		l := sluice.OutputLine{CustomID: id, Response: &sluice.Response{StatusCode: status, RequestID: reqID, Body: body}}
		if asError {
			l.Response = nil
			l.Error = &sluice.LineError{Code: sluice.CodeMissingResult, Message: string(body), Attempts: status}
		}
		want, werr := json.Marshal(&l)
		got, err := AppendOutputLine([]byte("x"), &l)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%+v: error %v, json.Marshal's %v", l, err, werr)
		}
		if err == nil && string(got) != "x"+string(want) {
			t.Fatalf("%+v:\n got %s\nwant x%s", l, got, want)
		}
		rec, err := AppendResultLine([]byte("y"), 42, asError, &l)
		if werr == nil && (err != nil || string(rec) != "y"+string(AppendResultRecord(nil, 42, asError, want))) {
			t.Fatalf("%+v: record %q (%v), want y%q", l, rec, err, AppendResultRecord(nil, 42, asError, want))
		}
		if werr != nil && (err == nil || string(rec) != "y") {
			t.Fatalf("%+v: record %q (%v), want the error and dst unchanged", l, rec, err)
		}
	})
}

func BenchmarkAppendResultLine(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-49ac829d9af37f932a265a2d","object":"chat.completion","created":1795420250,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"echo: t nialpxe atad ni esualc hcihw noitpecxe","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":148,"completion_tokens":12,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_emulator"}`)
	l := &sluice.OutputLine{CustomID: "req-0", Response: &sluice.Response{StatusCode: 200, RequestID: "req_83734086b7d42d9cecae18860261936b", Body: body}}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			js, err := json.Marshal(l)
			if err != nil {
				b.Fatal(err)
			}
			buf = AppendResultRecord(buf[:0], 7, false, js)
		}
	})
	b.Run("AppendResultLine", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		var err error
		for b.Loop() {
			if buf, err = AppendResultLine(buf[:0], 7, false, l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMarkCompact: a body the decoder vouched for is copied unchecked; a
// Body set to another slice afterwards, even of the same length, is
// checked again.
func TestMarkCompact(t *testing.T) {
	body := json.RawMessage(`{"a": 1}`) // not canonical: only to see the mark obeyed
	r := &sluice.Response{StatusCode: 200, Body: body}
	r.MarkCompact()
	l := sluice.OutputLine{CustomID: "c", Response: r}
	got, err := AppendOutputLine(nil, &l)
	if want := `{"custom_id":"c","response":{"status_code":200,"body":{"a": 1}},"error":null}`; err != nil || string(got) != want {
		t.Fatalf("marked: %s (%v), want %s", got, err, want)
	}
	want := `{"custom_id":"c","response":{"status_code":200,"body":{"b":2}},"error":null}`
	for _, b := range []json.RawMessage{json.RawMessage(` {"b": 2}`)[1:], json.RawMessage(`{"b" :2}`)} {
		copied := *r
		copied.Body = b
		l.Response = &copied
		if got, err := AppendOutputLine(nil, &l); err != nil || string(got) != want {
			t.Fatalf("Body %s set after the mark: %s (%v), want %s", b, got, err, want)
		}
	}
}

// TestResultOwned: Owned copies a lent body (the lender's later writes do
// not reach it) and keeps the compact mark on the copy, not on the lent
// bytes.
func TestResultOwned(t *testing.T) {
	buf := []byte(`{"a": 1}`) // not canonical: the mark is what is obeyed
	r := sluice.Result{CustomID: "c", Line: sluice.OutputLine{CustomID: "c", Response: &sluice.Response{StatusCode: 200, Body: buf}}}
	r.Line.Response.MarkCompact()
	own := r.Owned()
	copy(buf, `{"b": 2}`) // the lender reuses its buffer
	got, err := AppendOutputLine(nil, &own.Line)
	if want := `{"custom_id":"c","response":{"status_code":200,"body":{"a": 1}},"error":null}`; err != nil || string(got) != want {
		t.Fatalf("owned: %s (%v), want %s", got, err, want)
	}
	if !own.Line.Response.MarkedCompact() || &own.Line.Response.Body[0] == &buf[0] {
		t.Fatal("the copy lost its mark or is the lent buffer")
	}
	plain := sluice.Result{Line: sluice.OutputLine{Response: &sluice.Response{StatusCode: 200, Body: []byte(`{"b":2}`)}}}
	if plain.Owned().Line.Response.MarkedCompact() {
		t.Fatal("Owned marked compact a body that was not")
	}
	if e := (sluice.Result{Line: sluice.OutputLine{Error: &sluice.LineError{Code: "x"}}}).Owned(); e.Line.Error.Code != "x" {
		t.Fatal("an error result changed")
	}
}
