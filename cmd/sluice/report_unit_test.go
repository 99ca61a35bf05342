package main

import (
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
)

// scanResults counts records longer than its read buffer once each and
// reads a failure's code and custom_id whatever its length; examples stay
// at reportExamples a code.
func TestReportScanResultsLongRecords(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	var b strings.Builder
	b.WriteString(`0	s	{"custom_id":"a","response":{"status_code":200,"body":{"t":"` + big + `"}},"error":null}` + "\n")
	b.WriteString(`1	f	{"custom_id":"b","response":null,"error":{"code":"batch_expired","message":"` + big + `"}}` + "\n")
	for i := range 5 {
		b.WriteString(`2	f	{"custom_id":"c` + string(rune('0'+i)) + `","response":{"status_code":400,"body":{"error":{"message":"bad <b>"}}},"error":null}` + "\n")
	}
	b.WriteString(`3	s	{"custom_id":"d","response":{"status_code":200,"body":{}},"error":null}`) // no final newline
	g := newCodeGroups()
	o, err := scanResults(strings.NewReader(b.String()), &sluice.Chunk{ID: 4, Attempt: 2}, g)
	if err != nil {
		t.Fatal(err)
	}
	if o.Succeeded != 2 || o.Failed != 6 {
		t.Fatalf("counted %+v, want 2 succeeded and 6 failed", o)
	}
	got := g.sorted()
	if len(got) != 2 || got[0].Code != "http_400" || got[0].Count != 5 || got[1].Code != "batch_expired" || got[1].Count != 1 {
		t.Fatalf("groups %+v", got)
	}
	if n := len(got[0].Examples); n != reportExamples {
		t.Errorf("%d examples kept, want %d", n, reportExamples)
	}
	if ex := got[1].Examples[0]; ex.CustomID != "b" || len(ex.Message) > reportMessage+4 || ex.Chunk != 4 || ex.Attempt != 2 {
		t.Errorf("example %q chunk %d attempt %d, message of %d bytes", ex.CustomID, ex.Chunk, ex.Attempt, len(ex.Message))
	}
	if got[0].Examples[0].Message != "bad <b>" {
		t.Errorf("message %q", got[0].Examples[0].Message)
	}
}
