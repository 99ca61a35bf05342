package emulator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

func TestOpenAISDKRoundTrip(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, Seed: 7})
	c := oaClient(ts)
	ctx := context.Background()
	const n = 20
	input := emutest.ChatLines(n, "gpt-4o-mini")
	f := upload(t, c, "sluice-job1-c0-a1.jsonl", input)
	check.Fatal(t, "file object", f, f.Purpose == openai.FileObjectPurposeBatch, f.Bytes == int64(len(input)), f.Filename == "sluice-job1-c0-a1.jsonl",
		//lint:ignore SA1019 the API still sends status; the emulator must too
		strings.HasPrefix(f.ID, "file-"), f.Status == "processed")
	checkSpec(t, "OpenAIFile", f.RawJSON())
	got := check.Try(c.Files.Get(ctx, f.ID)).Must(t, "get file")
	check.Fatal(t, "get file", got, got.ID == f.ID)

	b := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, map[string]string{"sluice_job": "job1"})
	checkSpec(t, "Batch", b.RawJSON())
	check.Fatal(t, "created batch", b.RawJSON(), b.Status == openai.BatchStatusValidating, b.InputFileID == f.ID, b.CompletionWindow == "24h",
		b.ExpiresAt == b.CreatedAt+86400, b.Metadata["sluice_job"] == "job1", b.JSON.InProgressAt.Raw() == "null")
	clk.Advance(2 * time.Second)
	b = getBatch(t, c, b.ID)
	check.Fatal(t, "in progress", b.RawJSON(), b.Status == openai.BatchStatusInProgress, b.RequestCounts.Total == n,
		b.InProgressAt == b.CreatedAt+1, b.Model == "gpt-4o-mini")
	clk.Advance(5 * time.Second)
	b = getBatch(t, c, b.ID)
	check.Fatal(t, "progress counts should be partial", b.RequestCounts, b.RequestCounts.Completed != 0, b.RequestCounts.Completed != n)
	clk.Advance(2 * time.Second)
	b = getBatch(t, c, b.ID)
	check.Fatal(t, "want finalizing", b.Status, b.Status == openai.BatchStatusFinalizing)
	clk.Advance(time.Second)
	b = getBatch(t, c, b.ID)
	check.Fatal(t, "completed", b.RawJSON(), b.Status == openai.BatchStatusCompleted, b.RequestCounts.Completed == n, b.RequestCounts.Failed == 0,
		b.OutputFileID != "", b.ErrorFileID == "", b.CompletedAt == b.CreatedAt+10, b.FinalizingAt == b.CreatedAt+9)
	check.Fatal(t, "usage", b.Usage, b.Usage.InputTokens != 0, b.Usage.OutputTokens != 0, b.Usage.TotalTokens == b.Usage.InputTokens+b.Usage.OutputTokens)
	of := check.Try(c.Files.Get(ctx, b.OutputFileID)).Must(t, "output file")
	check.Fatal(t, "output file", of, of.Purpose == openai.FileObjectPurposeBatchOutput)
	checkSDK(t, of)

	lines := parseLines(t, download(t, c, b.OutputFileID))
	check.Fatal(t, fmt.Sprintf("want %d output lines", n), len(lines), len(lines) == n)
	ids := checkChatOutput(t, lines, b.Usage)
	check.Fatal(t, "output order should not be input order", ids, !slices.IsSorted(ids), !slices.Equal(ids, inputOrder(n)))
	slices.Sort(ids)
	want := inputOrder(n)
	slices.Sort(want)
	check.Fatal(t, "custom ids", ids, slices.Equal(ids, want))
	st := s.Stats()
	check.Fatal(t, "stats", st, st.RequestsProcessed == n, st.FilesUploaded == 1, st.BatchesCreated == 1, st.RequestsProcessedMoreThanOnce == 0)
	// Deleting the input file keeps the batch intact.
	del := check.Try(c.Files.Delete(ctx, f.ID)).Must(t, "delete")
	check.Fatal(t, "delete", del, del.Deleted, del.ID == f.ID)
	checkSpec(t, "DeleteFileResponse", del.RawJSON())
	if _, err := c.Files.Get(ctx, f.ID); err == nil {
		t.Fatal("deleted file still there")
	}
}

// checkChatOutput checks a chat batch's output lines, each an SDK-readable
// echo answer to emutest.ChatLines' question with its token counts, and
// that their usage sums to the batch's; it returns their custom_ids in
// output order.
func checkChatOutput(t *testing.T, lines []outLine, usage openai.BatchUsage) []string {
	t.Helper()
	var ids []string
	var inTok, outTok int64
	for _, l := range lines {
		ids = append(ids, l.CustomID)
		check.Fatal(t, "bad line", l, l.Error == nil, l.Response != nil)
		check.Fatal(t, "bad line", l, l.Response.StatusCode == 200, strings.HasPrefix(l.ID, "batch_req_"), strings.HasPrefix(l.Response.RequestID, "req_"))
		var cc openai.ChatCompletion
		emutest.MustUnmarshal(t, l.Response.Body, &cc)
		checkSDK(t, &cc)
		var i int
		fmt.Sscanf(l.CustomID, "req-%d", &i)
		want := emutest.ExpectedAnswer(fmt.Sprintf("Question number %d: what is the meaning of life?", i))
		check.Fatal(t, "completion", string(l.Response.Body), cc.Object == "chat.completion", len(cc.Choices) == 1)
		check.Fatal(t, "completion", string(l.Response.Body), cc.Choices[0].Message.Content == want, cc.Choices[0].FinishReason == "stop", cc.Model == "gpt-4o-mini")
		prompt := len("be brief") + 1 + len(fmt.Sprintf("Question number %d: what is the meaning of life?", i))
		check.Fatal(t, fmt.Sprintf("usage for prompt of %d bytes", prompt), cc.Usage,
			cc.Usage.PromptTokens == int64((prompt+3)/4), cc.Usage.CompletionTokens == int64((len(want)+3)/4))
		inTok += cc.Usage.PromptTokens
		outTok += cc.Usage.CompletionTokens
	}
	check.Fatal(t, fmt.Sprintf("batch usage, lines sum in=%d out=%d", inTok, outTok), usage, inTok == usage.InputTokens, outTok == usage.OutputTokens)
	return ids
}

func inputOrder(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("req-%d", i)
	}
	return out
}

func TestOpenAISDKListPagination(t *testing.T) {
	_, ts := start(t, Options{})
	c := oaClient(ts)
	ctx := context.Background()
	var made []string
	for i := range 5 {
		f := upload(t, c, fmt.Sprintf("in%d.jsonl", i), emutest.ChatLines(2, "m"))
		made = append(made, createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil).ID)
	}
	page, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	checkSpec(t, "ListBatchesResponse", page.RawJSON())
	if len(page.Data) != 2 || !page.HasMore || page.Data[0].ID != made[4] {
		t.Fatalf("first page: %s", page.RawJSON())
	}
	var listed []string
	it := c.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	for it.Next() {
		b := it.Current()
		checkSDK(t, &b)
		listed = append(listed, b.ID)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	slices.Reverse(made)
	if !slices.Equal(listed, made) {
		t.Fatalf("listed %v, want newest first %v", listed, made)
	}
	if _, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(101)}); err == nil {
		t.Fatal("limit 101 accepted")
	}

	// Files: purpose filter, order, cursor. The 5 inputs plus 5 outputs.
	var files []string
	fit := c.Files.ListAutoPaging(ctx, openai.FileListParams{Purpose: openai.String("batch"), Limit: openai.Int(2),
		Order: openai.FileListParamsOrderAsc})
	for fit.Next() {
		f := fit.Current()
		checkSDK(t, &f)
		files = append(files, f.Filename)
	}
	if fit.Err() != nil || !slices.Equal(files, []string{"in0.jsonl", "in1.jsonl", "in2.jsonl", "in3.jsonl", "in4.jsonl"}) {
		t.Fatalf("files %v %v", files, fit.Err())
	}
	fp, err := c.Files.List(ctx, openai.FileListParams{})
	if err != nil || len(fp.Data) != 10 || fp.HasMore {
		t.Fatalf("all files: %v %d", err, len(fp.Data))
	}
	checkSpec(t, "ListFilesResponse", fp.RawJSON())
}

// The other batch endpoints, parsed with the SDK's own response types.
func TestOpenAIBatchEndpoints(t *testing.T) {
	_, ts := start(t, Options{})
	c := oaClient(ts)
	emb := `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":["hello","world"]}}` + "\n" +
		`{"custom_id":"e2","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"hello"}}` + "\n"
	b := submit(t, c, "emb.jsonl", []byte(emb), openai.BatchNewParamsEndpointV1Embeddings)
	b = getBatch(t, c, b.ID)
	vecs := map[string][][]float64{}
	for _, l := range parseLines(t, download(t, c, b.OutputFileID)) {
		var r openai.CreateEmbeddingResponse
		emutest.MustUnmarshal(t, l.Response.Body, &r)
		checkSDK(t, &r)
		for _, d := range r.Data {
			if len(d.Embedding) != 8 {
				t.Fatalf("dimension %d", len(d.Embedding))
			}
			vecs[l.CustomID] = append(vecs[l.CustomID], d.Embedding)
		}
		if r.Usage.PromptTokens == 0 || r.Model != "text-embedding-3-small" {
			t.Fatalf("embedding response %s", l.Response.Body)
		}
	}
	if len(vecs["e1"]) != 2 || len(vecs["e2"]) != 1 || !slices.Equal(vecs["e1"][0], vecs["e2"][0]) || slices.Equal(vecs["e1"][0], vecs["e1"][1]) {
		t.Fatalf("embeddings %v", vecs)
	}

	resp := `{"custom_id":"r1","method":"POST","url":"/v1/responses","body":{"model":"gpt-4.1-mini","input":"Tell me a joke about cats"}}` + "\n" +
		`{"custom_id":"r2","method":"POST","url":"/v1/responses","body":{"model":"gpt-4.1-mini","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"abc"}]}]}}` + "\n"
	b = submit(t, c, "resp.jsonl", []byte(resp), openai.BatchNewParamsEndpointV1Responses)
	b = getBatch(t, c, b.ID)
	for _, l := range parseLines(t, download(t, c, b.OutputFileID)) {
		var r responses.Response
		emutest.MustUnmarshal(t, l.Response.Body, &r)
		checkSDK(t, &r)
		want := map[string]string{"r1": emutest.ExpectedAnswer("Tell me a joke about cats"), "r2": "echo: cba"}[l.CustomID]
		if r.OutputText() != want || r.Status != "completed" || r.Usage.InputTokens == 0 {
			t.Fatalf("response %s: got %q want %q", l.Response.Body, r.OutputText(), want)
		}
	}

	comp := `{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","max_tokens":100}}` + "\n"
	b = submit(t, c, "comp.jsonl", []byte(comp), openai.BatchNewParamsEndpointV1Completions)
	b = getBatch(t, c, b.ID)
	for _, l := range parseLines(t, download(t, c, b.OutputFileID)) {
		var r openai.Completion
		emutest.MustUnmarshal(t, l.Response.Body, &r)
		checkSDK(t, &r)
		if r.Choices[0].Text != emutest.ExpectedAnswer("Say this is a test") {
			t.Fatalf("completion %s", l.Response.Body)
		}
	}
}

// The model endpoints are also served directly; the SDK must parse them.
func TestOpenAISyncEndpoints(t *testing.T) {
	_, ts := start(t, Options{EmbeddingDim: 4})
	c := oaClient(ts)
	ctx := context.Background()
	cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")}, MaxTokens: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	checkSDK(t, cc)
	if cc.Choices[0].Message.Content != "echo: er" || cc.Choices[0].FinishReason != "length" || cc.Usage.CompletionTokens != 2 {
		t.Fatalf("truncated chat: %s", cc.RawJSON())
	}
	e, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "c"}}})
	if err != nil || len(e.Data) != 3 || len(e.Data[2].Embedding) != 4 || e.Data[2].Index != 2 {
		t.Fatalf("embeddings: %v %+v", err, e)
	}
	checkSDK(t, e)
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil || r.OutputText() != "echo: ih" {
		t.Fatalf("responses: %v %+v", err, r)
	}
	checkSDK(t, r)
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini"})
	var apiErr *openai.Error
	if !asErr(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "messages" {
		t.Fatalf("missing messages: %v", err)
	}
}

// TestOpenAIChatJSONModeAndForcedTool: the fake chat model answers JSON
// mode with a JSON value as the content and a forced tool (tool_choice
// "required" or a named function) with one tool call carrying the answer
// as its arguments, as OpenAI-shaped APIs do; the SDK parses both.
func TestOpenAIChatJSONModeAndForcedTool(t *testing.T) {
	_, ts := start(t, Options{})
	const msgs = `"messages":[{"role":"user","content":"q 1: what?"}]`
	const tools = `"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}},{"type":"function","function":{"name":"other"}}]`
	const want = "echo: ?tahw :1 q"
	for _, c := range []struct {
		extra, tool, finish string
	}{
		{`"response_format":{"type":"json_object"}`, "", "stop"},
		{`"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}}`, "", "stop"},
		{tools + `,"tool_choice":"required"`, "lookup", "tool_calls"},
		{tools + `,"tool_choice":{"type":"function","function":{"name":"other"}}`, "other", "stop"},
		{tools + `,"tool_choice":"none"`, "", "stop"},
	} {
		body := `{"model":"gpt-4o-mini",` + msgs + `,` + c.extra + `}`
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var cc openai.ChatCompletion
		err = json.NewDecoder(resp.Body).Decode(&cc)
		resp.Body.Close()
		if err != nil || len(cc.Choices) != 1 {
			t.Fatalf("%s: %v %+v", c.extra, err, cc)
		}
		ch := cc.Choices[0]
		if ch.FinishReason != c.finish {
			t.Fatalf("%s: finish_reason %q, want %q", c.extra, ch.FinishReason, c.finish)
		}
		var js struct{ Echo string }
		switch {
		case c.tool != "":
			tc := ch.Message.ToolCalls
			if len(tc) != 1 || tc[0].ID == "" || tc[0].Function.Name != c.tool || ch.Message.Content != "" ||
				json.Unmarshal([]byte(tc[0].Function.Arguments), &js) != nil || js.Echo != want {
				t.Fatalf("%s: want a call of %s, got %s", c.extra, c.tool, ch.Message.RawJSON())
			}
		case strings.Contains(c.extra, "json"):
			if err := json.Unmarshal([]byte(ch.Message.Content), &js); err != nil || js.Echo != want {
				t.Fatalf("%s: content %q (%v)", c.extra, ch.Message.Content, err)
			}
		default:
			if ch.Message.Content != want || len(ch.Message.ToolCalls) != 0 {
				t.Fatalf("%s: %s", c.extra, ch.Message.RawJSON())
			}
		}
	}
}

// TestOutputExpiresAfterHonoured: a create with output_expires_after (the
// official SDK's field) stamps the output file's expires_at that long
// after the file's creation, scaled by ResultRetentionScale; past it the
// file's metadata and content answer 404, and downloads and creates are
// counted in the stats. Out-of-range values are refused 400.
func TestOutputExpiresAfterHonoured(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{Now: clk.Now, ResultRetentionScale: 0.5})
	c := oaClient(ts)
	f := upload(t, c, "in.jsonl", emutest.ChatLines(3, "gpt-4o-mini"))
	for _, secs := range []int64{3599, 2592001} {
		_, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
			Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
			OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: secs}})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
			t.Errorf("output_expires_after %d: %v, want 400", secs, err)
		}
	}
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: 7200}})
	if err != nil {
		t.Fatal(err)
	}
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("status %s", b.Status)
	}
	out, err := c.Files.Get(context.Background(), b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.ExpiresAt - out.CreatedAt; got != 3600 {
		t.Errorf("output file kept %ds, want 3600 (7200 scaled by 0.5)", got)
	}
	if lines := download(t, c, b.OutputFileID); len(lines) != 3 {
		t.Fatalf("%d output lines", len(lines))
	}
	clk.Advance(time.Hour)
	if _, err := c.Files.Get(context.Background(), b.OutputFileID); err == nil {
		t.Error("expired output file: metadata still answered")
	}
	if _, err := c.Files.Content(context.Background(), b.OutputFileID); err == nil {
		t.Error("expired output file: content still answered")
	}
	st := s.Stats()
	if st.ResultsExpired != 2 || len(st.ResultDownloads) != 1 || st.ResultDownloads[0] != b.ID {
		t.Errorf("stats: results_expired %d, result_downloads %v", st.ResultsExpired, st.ResultDownloads)
	}
	if st.OutputExpiresAfter["7200"] != 1 || len(st.OutputExpiresAfter) != 1 {
		t.Errorf("stats: output_expires_after %v", st.OutputExpiresAfter)
	}
}
