package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

func TestJobKeyFromFilename(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"sluice-job1-c0-a1.jsonl":     "sluice-job1",
		"sluice-my-cats-c12-a3.jsonl": "sluice-my-cats",
		"input.jsonl":                 "",
	} {
		if got := jobKeyFromFilename(name); got != want {
			t.Errorf("%s: %q want %q", name, got, want)
		}
	}
	if got := jobKeyOpenAI(map[string]string{"sluice_job": "j"}, "sluice-x-c0-a1.jsonl"); got != "j" {
		t.Errorf("metadata wins: %q", got)
	}
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- ListenAndServe(ctx, "127.0.0.1:0", Options{}, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatal(err)
	}
	code, _, body := emutest.Do(t, "GET", fmt.Sprintf("http://%s/_emulator/stats", addr), nil, nil)
	var st Stats
	if code != 200 || json.Unmarshal(body, &st) != nil {
		t.Fatalf("%d %s", code, body)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not stop")
	}
}
