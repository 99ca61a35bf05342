package compat_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/wire"
	"github.com/sluice-batch/sluice/provider/compat"
)

var fastSeeds = []string{
	`{"id":"batch_req_1","custom_id":"req-0","response":{"status_code":200,"request_id":"req_8373","body":{"id":"chatcmpl-4","usage":{"prompt_tokens":148,"completion_tokens":12,"total_tokens":160}}},"error":null}`,
	`{"custom_id":"a","response":{"status_code":429,"body":{"error":{"message":"slow down"}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":null},"error":null}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"input_tokens":3,"output_tokens":4}}}}`,
	` { "custom_id" : "a" , "response" : { "status_code" : 200 , "body" : { "x" : [ 1 , 2 ] } } } `,
	`{"Custom_ID":"a","response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","custom_id":"b","response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a\u0062","response":{"status_code":200,"body":{}}}`,
	`{"custom\u005fid":"a","response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200.0,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":"200","body":{}}}`,
	`{"custom_id":"a","response":{"status_code":0,"body":{}},"error":{"code":"x","message":"y"}}`,
	`{"custom_id":"a","response":{"status_code":200,"request_id":null,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"STATUS_CODE":500,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{}},"id":5}`,
	`{"custom_id":"\xff","response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":99999999999999999999,"body":{}}}`,
	`{"custom_id":"","response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","response":[],"error":null}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{}}}x`,
	`{"custom_id":"a","response":{"status_code":-0,"body":{}}}`,
	`{"custom_id":"a","cuſtom_id":"b","response":{"status_code":200,"body":{}}}`,
	`{"usage":{"prompt_tokens":1.5e3,"completion_tokens":"7"},"usage":{"prompt_tokens":2}}`,
	`{"usage":{"prompt_tokens":null,"input_tokens":3,"output_tokens":-4,"completion_tokens":99999999999999999999}}`,
	`{"usag\u0065":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":2,"output_tokens":9007199254740993}}`,
	`{"usage":[1]}`,
	`[{"usage":{"prompt_tokens":1}}]`,
	// Bodies written as is, or not, by the encoder.
	`{"custom_id":"a","response":{"status_code":200,"body":{ "x" : [1, 2] }}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"c":"<b>&amp;"}}}`,
	"{\"custom_id\":\"a\",\"response\":{\"status_code\":200,\"body\":{\"c\":\"x\u2028y\u2029\"}}}",
	"{\"custom_id\":\"a\",\"response\":{\"status_code\":200,\"body\":{\"c\":\"\xff\xe2\x80\"}}}",
	`{"custom_id":"a","response":{"status_code":200,"body":{"c":"a\nb\u00e9\ud83d\ude00\/"}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":"text"}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":[{"usage":{"prompt_tokens":1}}]}}`,
	`{"custom_id":"é東🙂","response":{"status_code":200,"request_id":"ü","body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"request_id":"r\"q","body":{}}}`,
	`{"custom_id":"a<b>","response":{"status_code":200,"request_id":"&","body":{}}}`,
	// Errors, nested and not.
	`{"id":"x","custom_id":"a","response":null,"error":{"code":"batch_expired","message":"gone"}}`,
	`{"custom_id":"a","response":null,"error":{"code":429,"message":{"nested":["x"]}}}`,
	`{"custom_id":"a","error":"plain"}`,
	`{"custom_id":"a","response":{"status_code":400,"body":{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}},"error":null}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{}},"error":{"code":"x","message":"y"}}`,
	// Missing fields, keys in other spellings.
	`{"custom_id":"a","response":{"status_code":200}}`,
	`{"custom_id":"a","response":{"body":{}}}`,
	`{"response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"Body":{},"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{},"body":{}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{}},"response":{"status_code":500,"body":{}}}`,
	`{"custom_id":"a","respons\u0065":{"status_code":500,"body":{}},"response":{"status_code":200,"body":{}}}`,
	`{"custom_id":"a","résponse":1,"response":{"status_code":200,"body":{}}}`,
	// Usage where it is and where it is not.
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":5,"usage":{"prompt_tokens":2}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"x":{"usage":{"prompt_tokens":7}},"usage":{"output_tokens":3}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1,"usage":{"prompt_tokens":9}}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1}},"usage":{"prompt_tokens":2}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1},"k\u0065y":1}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"k\u0065y":1,"usage":{"prompt_tokens":1}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1,"x\"":2}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1e2,"completion_tokens":7}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":1,"completion_tokens":null}}}}`,
	// Huge and deep.
	`{"custom_id":"a","response":{"status_code":200,"body":{"c":"` + strings.Repeat("long text é ", 100000) + `","usage":{"prompt_tokens":5}}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"d":` + strings.Repeat("[", 990) + strings.Repeat("]", 990) + `}}}`,
	`{"custom_id":"a","response":{"status_code":200,"body":{"d":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}}`,
}

// FuzzDecodeLineFast: DecodeLine (with its fast path) answers every line
// exactly as encoding/json's decoding does: the same Result, or an error
// where it errs.
func FuzzDecodeLineFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, err := compat.DecodeLine(line)
		want, werr := compat.DecodeLineStd(line)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", line, err, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", line, got, want)
		}
		if json.Valid(line) {
			if u, w := compat.Usage(line), compat.UsageGJSON(line); u != w {
				t.Fatalf("usage of %q: %+v, gjson's %+v", line, u, w)
			}
		}
		if got.Line.Response != nil && !reflect.DeepEqual(*got.Line.Response, *want.Line.Response) {
			t.Fatalf("%q: response %+v, want %+v", line, *got.Line.Response, *want.Line.Response)
		}
		if err != nil {
			return
		}
		// The record written for it is json.Marshal's, byte for byte,
		// whether the body was vouched for or checked again.
		js, jerr := json.Marshal(got.Line)
		out, oerr := wire.AppendOutputLine(nil, &got.Line)
		if (oerr != nil) != (jerr != nil) || jerr == nil && !bytes.Equal(out, js) {
			t.Fatalf("%q:\nwritten %s (%v)\nwant    %s (%v)", line, out, oerr, js, jerr)
		}
		if r := got.Line.Response; r != nil {
			plain := *r
			plain.Body = append(json.RawMessage(nil), r.Body...) // not vouched for
			ol := got.Line
			ol.Response = &plain
			if again, _ := wire.AppendOutputLine(nil, &ol); !bytes.Equal(again, out) {
				t.Fatalf("%q: written %s, unvouched %s", line, out, again)
			}
		}
	})
}

func BenchmarkDecodeLine(b *testing.B) {
	line := []byte(`{"id":"batch_req_0123456789abcdef01234567","custom_id":"req-0","response":{"status_code":200,"request_id":"req_83734086b7d42d9cecae18860261936b","body":{"id":"chatcmpl-49ac829d9af37f932a265a2d","object":"chat.completion","created":1795420250,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"echo: t nialpxe atad ni esualc hcihw noitpecxe","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":148,"completion_tokens":12,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_emulator"}},"error":null}`)
	for _, bc := range []struct {
		name string
		fn   func([]byte) error
	}{
		{"encoding/json", func(l []byte) error { _, err := compat.DecodeLineStd(l); return err }},
		{"DecodeLine", func(l []byte) error { _, err := compat.DecodeLine(l); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if err := bc.fn(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
