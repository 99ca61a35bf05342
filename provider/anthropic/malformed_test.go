package anthropic_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
)

func TestDecodeSkipsMalformedLines(t *testing.T) {
	path := ptest.WriteFile(t, "results.jsonl", strings.Join([]string{
		`{"custom_id":"a","result":{"type":"expired"}}`,
		`{"custom_id":`,
		`{"result":{"type":"succeeded","message":{}}}`,
		`{"custom_id":"b","result":{"type":"canceled"}}`,
		`{"custom_id":"c","result":{"type":"succ`,
	}, "\n"))
	got, err := ptest.Decode(newClient(t, "http://127.0.0.1:1"), nil, path)
	var ml *sluice.MalformedLines
	if !errors.As(err, &ml) || ml.Count != 3 || ptest.CustomIDs(got) != "a,b" {
		t.Fatalf("err %v, delivered %v", err, ptest.CustomIDs(got))
	}
	if s := ml.Summary(3); !strings.Contains(s, "results.jsonl:2 (") || !strings.Contains(s, "results.jsonl:5 (") {
		t.Errorf("summary %q", s)
	}
}
