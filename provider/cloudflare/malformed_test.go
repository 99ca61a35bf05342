package cloudflare_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
)

// TestDecodeSkipsMalformedItems: items of the wrong shape are skipped and
// the answer read on; an answer that stops parsing keeps the items before
// the break (the first one included, though the usage never came).
func TestDecodeSkipsMalformedItems(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	lookup := func(i int) (string, bool) { return "", false }
	decode := func(body string) (string, *sluice.MalformedLines, error) {
		got, err := ptest.Decode(c, lookup, ptest.WriteFile(t, "answer.json", body))
		var ml *sluice.MalformedLines
		if errors.As(err, &ml) {
			err = nil
		}
		return ptest.CustomIDs(got), ml, err
	}
	ids, ml, err := decode(`{"success":true,"result":{"responses":[` +
		`{"id":0,"success":true,"result":{},"external_reference":"a"},"garbled",{"success":true,"result":{}},` +
		`{"id":3,"success":true,"result":{},"external_reference":"d"}],"usage":{"prompt_tokens":4}}}`)
	if err != nil || ml == nil || ml.Count != 2 || ids != "d,a" {
		t.Fatalf("err %v malformed %v ids %v", err, ml, ids)
	}
	if ml.Lines[0].Where() != "answer.json:2" || ml.Lines[1].Where() != "answer.json:3" {
		t.Errorf("skipped %s, %s", ml.Lines[0].Where(), ml.Lines[1].Where())
	}
	ids, ml, err = decode(`{"success":true,"result":{"responses":[{"id":0,"success":true,"result":{},"external_reference":"a"},` +
		`{"id":1,"success":true,"result":{},"external_reference":"b"},{"id":2,"succ`)
	if err != nil || ml == nil || ml.Count != 1 || ids != "b,a" ||
		!strings.Contains(ml.Error(), "unreadable from here on") {
		t.Fatalf("cut answer: err %v malformed %v ids %v", err, ml, ids)
	}
}
