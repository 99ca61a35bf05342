package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"github.com/sluice-batch/sluice"
)

// SucceededJSON is the Answer of a synchronous endpoint whose 2xx answer
// is the body a batch result would hold (Anthropic's Message, Gemini's
// GenerateContentResponse): a response with status 200 and the body
// compacted, its request id read from the header requestID (none when
// empty), its usage read by usage. An answer that is not JSON is
// NotAnAnswer.
func SucceededJSON(customID, requestID string, usage func(body []byte) sluice.Usage) func(*http.Response, []byte, *sluice.Result) error {
	return func(resp *http.Response, b []byte, res *sluice.Result) error {
		var buf bytes.Buffer
		if json.Compact(&buf, b) != nil {
			return NotAnAnswer(customID, "JSON")
		}
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: buf.Bytes()}
		if requestID != "" {
			res.Line.Response.RequestID = resp.Header.Get(requestID)
		}
		res.Usage = usage(buf.Bytes())
		return nil
	}
}

// CompactJSON is b without its insignificant space, or b as it is when it
// is not JSON.
func CompactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// ParseItem reads a chunk item's request: the string member idKey (its
// custom_id) and the JSON member bodyKey (what is POSTed), both required:
// {"custom_id","params"} for Anthropic, {"key","request"} for Gemini,
// {"custom_id","body"} for Mistral and Together. The item is decoded as
// encoding/json decodes a struct with those two tags.
func ParseItem(ref sluice.BatchRef, item []byte, idKey, bodyKey string) (id string, body json.RawMessage, err error) {
	t := reflect.StructOf([]reflect.StructField{
		{Name: "ID", Type: reflect.TypeFor[string](), Tag: reflect.StructTag(`json:"` + idKey + `"`)},
		{Name: "Body", Type: reflect.TypeFor[json.RawMessage](), Tag: reflect.StructTag(`json:"` + bodyKey + `"`)},
	})
	v := reflect.New(t)
	err = json.Unmarshal(item, v.Interface())
	id, body = v.Elem().Field(0).String(), v.Elem().Field(1).Bytes()
	if err != nil || id == "" || len(body) == 0 {
		return "", nil, fmt.Errorf("chunk %d: an item is not a batch request (%v)", ref.Chunk, err)
	}
	return id, body, nil
}
