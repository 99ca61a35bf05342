package anthropic_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
)

func TestDecodeSkipsMalformedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	os.WriteFile(path, []byte(strings.Join([]string{
		`{"custom_id":"a","result":{"type":"expired"}}`,
		`{"custom_id":`,
		`{"result":{"type":"succeeded","message":{}}}`,
		`{"custom_id":"b","result":{"type":"canceled"}}`,
		`{"custom_id":"c","result":{"type":"succ`,
	}, "\n")), 0o600)
	c := newClient(t, "http://127.0.0.1:1")
	var ids []string
	err := c.Decode(context.Background(), sluice.BatchRef{}, []string{path}, nil, func(r sluice.Result) error {
		ids = append(ids, r.CustomID)
		return nil
	})
	var ml *sluice.MalformedLines
	if !errors.As(err, &ml) || ml.Count != 3 || strings.Join(ids, ",") != "a,b" {
		t.Fatalf("err %v, delivered %v", err, ids)
	}
	if s := ml.Summary(3); !strings.Contains(s, "results.jsonl:2 (") || !strings.Contains(s, "results.jsonl:5 (") {
		t.Errorf("summary %q", s)
	}
}
