package emulator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
)

func antRequests(n int, prefix string) []anthropic.MessageBatchNewParamsRequest {
	reqs := make([]anthropic.MessageBatchNewParamsRequest, n)
	for i := range reqs {
		reqs[i] = anthropic.MessageBatchNewParamsRequest{
			CustomID: fmt.Sprintf("%s-%d", prefix, i),
			Params: anthropic.MessageBatchNewParamsRequestParams{
				Model: "claude-sonnet-4-5", MaxTokens: 256,
				System:   []anthropic.TextBlockParam{{Text: "be brief"}},
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("Hello number %d, how are you?", i)))},
			}}
	}
	return reqs
}

type antResult struct {
	typ, customID string
	r             anthropic.MessageBatchIndividualResponse
}

func antResults(t *testing.T, c anthropic.Client, id string) []antResult {
	t.Helper()
	st := c.Messages.Batches.ResultsStreaming(context.Background(), id, anthropic.MessageBatchResultsParams{})
	defer st.Close()
	var out []antResult
	for st.Next() {
		r := st.Current()
		checkSDK(t, &r)
		out = append(out, antResult{r.Result.Type, r.CustomID, r})
	}
	if err := st.Err(); err != nil {
		t.Fatalf("results: %v", err)
	}
	return out
}

func TestAnthropicSDKRoundTrip(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	c := antClient(ts)
	ctx := context.Background()
	const n = 15
	b := check.Try(c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: antRequests(n, "q")})).Must(t, "create")
	checkSDK(t, b)
	check.Fatal(t, "created", b.RawJSON(), strings.HasPrefix(b.ID, "msgbatch_"), b.ProcessingStatus == anthropic.MessageBatchProcessingStatusInProgress,
		b.RequestCounts.Processing == n, b.ResultsURL == "", b.JSON.ResultsURL.Raw() == "null",
		b.ExpiresAt.Equal(b.CreatedAt.Add(24*time.Hour)), b.CreatedAt.Equal(clk.Now()), b.JSON.EndedAt.Raw() == "null")
	for _, k := range []string{"archived_at", "cancel_initiated_at", "ended_at", "results_url"} {
		check.Fatal(t, k+" should be null", b.RawJSON(), strings.Contains(b.RawJSON(), `"`+k+`":null`))
	}
	clk.Advance(5 * time.Second)
	b = check.Try(c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})).Must(t, "mid-way")
	check.Fatal(t, "mid-way", b.RawJSON(), b.RequestCounts.Processing == n, b.RequestCounts.Succeeded == 0)
	if _, err := c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); err == nil {
		t.Fatal("deleting a running batch must fail")
	}
	clk.Advance(5 * time.Second)
	b = check.Try(c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})).Must(t, "ended")
	checkSDK(t, b)
	check.Fatal(t, "ended", b.RawJSON(), b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded, b.RequestCounts.Succeeded == n,
		b.RequestCounts.Processing == 0, b.EndedAt.Equal(clk.Now()), strings.HasSuffix(b.ResultsURL, "/v1/messages/batches/"+b.ID+"/results"))
	res := antResults(t, c, b.ID)
	check.Fatal(t, fmt.Sprintf("want %d results", n), len(res), len(res) == n)
	var ids []string
	for _, r := range res {
		ids = append(ids, r.customID)
		check.Fatal(t, "result", r.r.RawJSON(), r.typ == "succeeded")
		m := r.r.Result.AsSucceeded().Message
		var i int
		fmt.Sscanf(r.customID, "q-%d", &i)
		want := emutest.ExpectedAnswer(fmt.Sprintf("Hello number %d, how are you?", i))
		check.Fatal(t, "message", r.r.RawJSON(), m.Role == "assistant", m.Content[0].Text == want, m.StopReason == anthropic.StopReasonEndTurn,
			strings.HasPrefix(m.ID, "msg_"), m.Usage.InputTokens != 0, m.Usage.OutputTokens == int64((len(want)+3)/4))
	}
	check.Fatal(t, "results should not be in request order", ids, !slices.IsSortedFunc(ids, func(a, b string) int { return strings.Compare(a, b) }))
	del := check.Try(c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{})).Must(t, "delete")
	check.Fatal(t, "delete", del, del.ID == b.ID, del.Type == "message_batch_deleted")
	_, err := c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	var ae *anthropic.Error
	if !asErr(err, &ae) || ae.StatusCode != 404 || ae.Type() != "not_found_error" {
		t.Fatalf("get deleted: %v", err)
	}
	st := s.Stats().ByFamily["anthropic"]
	check.Fatal(t, "stats", st, st.RequestsProcessed == n, st.BatchesCreated == 1)
}

func TestAnthropicSDKCancelAndList(t *testing.T) {
	clk := emutest.NewClock()
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	c := antClient(ts)
	ctx := context.Background()
	var made []string
	for i := range 5 {
		b, err := c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: antRequests(10, fmt.Sprintf("b%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, b.ID)
	}
	clk.Advance(4 * time.Second)
	b, err := c.Messages.Batches.Cancel(ctx, made[0], anthropic.MessageBatchCancelParams{})
	if err != nil {
		t.Fatal(err)
	}
	checkSDK(t, b)
	if b.ProcessingStatus != anthropic.MessageBatchProcessingStatusCanceling || !b.CancelInitiatedAt.Equal(clk.Now()) {
		t.Fatalf("cancel: %s", b.RawJSON())
	}
	clk.Advance(time.Second)
	b, _ = c.Messages.Batches.Get(ctx, made[0], anthropic.MessageBatchGetParams{})
	if b.ProcessingStatus != anthropic.MessageBatchProcessingStatusEnded || b.RequestCounts.Canceled != 6 || b.RequestCounts.Succeeded != 4 {
		t.Fatalf("cancelled: %s", b.RawJSON())
	}
	kinds := map[string]int{}
	for _, r := range antResults(t, c, made[0]) {
		kinds[r.typ]++
	}
	if kinds["canceled"] != 6 || kinds["succeeded"] != 4 {
		t.Fatalf("result kinds %v", kinds)
	}
	if _, err := c.Messages.Batches.Cancel(ctx, made[0], anthropic.MessageBatchCancelParams{}); err == nil {
		t.Fatal("cancelling an ended batch should fail")
	}

	var listed []string
	it := c.Messages.Batches.ListAutoPaging(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(2)})
	for it.Next() {
		listed = append(listed, it.Current().ID)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	newestFirst := slices.Clone(made)
	slices.Reverse(newestFirst)
	if !slices.Equal(listed, newestFirst) {
		t.Fatalf("listed %v want %v", listed, newestFirst)
	}
	// before_id pages towards newer batches.
	page, err := c.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{BeforeID: anthropic.String(made[0]), Limit: anthropic.Int(2)})
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != made[2] || page.Data[1].ID != made[1] || !page.HasMore {
		t.Fatalf("before_id page: %v %s", err, page.RawJSON())
	}
}

func TestAnthropicSyncMessage(t *testing.T) {
	_, ts := start(t, Options{})
	c := antClient(ts)
	m, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 3,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("abcdefghijklmnop"))}})
	if err != nil {
		t.Fatal(err)
	}
	checkSDK(t, m)
	if m.Content[0].Text != "echo: ponmlk" || m.StopReason != anthropic.StopReasonMaxTokens {
		t.Fatalf("message %s", m.RawJSON())
	}
}
