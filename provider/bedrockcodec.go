package provider

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/translate"
)

// bedrockURL is a Bedrock runtime path: /model/{modelId}/invoke (an
// InvokeModel body) or /model/{modelId}/converse (a Converse body), the
// model id path-escaped when it is an ARN.
var bedrockURL = regexp.MustCompile(`^/model/([^/]+)/(invoke|converse)$`)

// BedrockModel returns the model id of a Bedrock line's url and whether
// the body is a Converse request.
func BedrockModel(u string) (model string, converse bool, ok bool) {
	m := bedrockURL.FindStringSubmatch(u)
	if m == nil {
		return "", false, false
	}
	id, err := url.PathUnescape(m[1])
	if err != nil || id == "" {
		return "", false, false
	}
	return id, m[2] == "converse", true
}

// BedrockConverse reports whether the batch job of a chunk of url and
// model is created with modelInvocationType Converse: /converse lines,
// and chat completions lines of models without an InvokeModel body sluice
// writes (translate.BedrockKindOf).
func BedrockConverse(url, model string) bool {
	if url == ChatURL {
		return translate.BedrockKindOf(model) == translate.BedrockConverse
	}
	_, converse, _ := BedrockModel(url)
	return converse
}

// bedrockNativeURL is the url of the native line a translated chat line
// of model stands for.
func bedrockNativeURL(model string) string {
	op := "invoke"
	if translate.BedrockKindOf(model) == translate.BedrockConverse {
		op = "converse"
	}
	return "/model/" + url.PathEscape(model) + "/" + op
}

// bedrockEmbeds is the translator of /v1/embeddings lines for a Bedrock
// model: Titan's, or none.
func bedrockEmbeds(model string) *translate.Embedder {
	if translate.BedrockKindOf(model) == translate.BedrockTitanEmbed {
		return translate.TitanEmbeddings
	}
	return nil
}

// BedrockCodec writes chunk files as Bedrock batch inference input JSONL,
// one {"recordId": custom_id, "modelInput": body} per line
// (docs/providers/bedrock.md). The url names the model the job is created
// for; the body is the model's InvokeModel body (Claude with
// anthropic_version, Llama, Nova, Titan embeddings...) or a Converse
// request, sent as written.
type BedrockCodec struct{}

func (BedrockCodec) Validate(it *sluice.Item) error {
	model, converse, ok := BedrockModel(it.URL)
	if !ok {
		return fmt.Errorf("url %q is not a Bedrock endpoint (accepted: /model/{modelId}/invoke, /model/{modelId}/converse, and /v1/chat/completions and /v1/embeddings translated)", it.URL)
	}
	if it.Model != "" && !it.ModelFromJob && it.Model != model {
		return fmt.Errorf("body.model %q is not the model of the url (%s)", it.Model, model)
	}
	it.Model, it.ModelFromJob = model, false
	if !gjson.ParseBytes(it.Body).IsObject() {
		return errors.New("body must be a JSON object (the model's InvokeModel body, or a Converse request)")
	}
	switch {
	case converse:
		if m := gjson.GetBytes(it.Body, "messages"); !m.IsArray() {
			return errors.New("body.messages must be an array for a Converse request")
		}
	case translate.BedrockKindOf(model) == translate.BedrockClaude:
		if v := gjson.GetBytes(it.Body, "anthropic_version"); v.Type != gjson.String {
			return fmt.Errorf("body.anthropic_version must be set for Claude on Bedrock (%q)", translate.BedrockAnthropicVersion)
		}
		if gjson.GetBytes(it.Body, "model").Exists() {
			return errors.New("body.model must not be set for Claude on Bedrock: the url names the model")
		}
	}
	return nil
}

func (BedrockCodec) Envelope() sluice.Envelope { return sluice.Envelope{} }

func (BedrockCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	dst = append(dst, `{"recordId":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"modelInput":`...)
	dst = append(dst, bytes.TrimSpace(it.Body)...)
	return append(dst, "}\n"...), nil
}

// MaxOutput implements sluice.OutputBounder: Llama's max_gen_len, Nova's
// and Converse's inferenceConfig.maxTokens, else the body's max_tokens;
// an embeddings model produces none.
func (BedrockCodec) MaxOutput(it *sluice.Item, read int64) int64 {
	if translate.BedrockKindOf(it.Model) == translate.BedrockTitanEmbed {
		return 0
	}
	for _, path := range []string{"max_gen_len", "inferenceConfig.maxTokens"} {
		if v := gjson.GetBytes(it.Body, path); v.Type == gjson.Number && v.Num >= 0 {
			return int64(v.Num)
		}
	}
	return read
}

// bedrockServes: Bedrock model ids are provider.model (anthropic.claude-…,
// meta.llama…, amazon.nova-…), possibly with a region prefix or as ARNs.
func bedrockServes(m string) bool {
	return strings.Contains(m, ".") || strings.HasPrefix(m, "arn:")
}

// bedrockPreset: Amazon Bedrock batch inference (docs/providers/bedrock.md).
// Its quotas are per model and adjustable, their defaults unconfirmed:
// 100 records at least per job (reported 100 in 2026 and 1,000 in 2024:
// --min-batch-requests), 50,000 records per file and per job (one file
// per job here, so one limit), 1 GB per input file (the job's 5 GB cannot
// be reached with one file), and some 10 jobs submitted or running per
// model (MaxLiveBatches counts each model's jobs apart: the client's
// Capabilities say LivePerModel).
var bedrockPreset = Preset{
	Name: "bedrock", Family: FamilyBedrock, BaseURL: "", BaseURLEnv: "AWS_ENDPOINT_URL_BEDROCK",
	Limits:      sluice.Limits{MaxBatchBytes: 1_000_000_000, MaxBatchRequests: 50_000, MinBatchRequests: 100, MaxLiveBatches: 10},
	Endpoints:   []string{"/model/{modelId}/invoke", "/model/{modelId}/converse", ChatURL, EmbeddingsURL}, // chat lines translated (docs/translation.md), embeddings lines to Titan
	InputFormat: "the model's InvokeModel body (/model/{modelId}/invoke) or a Converse request (/model/{modelId}/converse); sent as {recordId, modelInput}",
	Window:      "timeoutDurationInHours, 24h to 168h (--bedrock-timeout-hours), then Expired",
	// The control plane's documented rate limits are low (a few creates
	// per second); polls are cheap.
	RequestsPerSecond: 2, Burst: 5,
	Notes: "input and output in S3 (--bedrock-bucket); AWS credential chain and AWS_REGION; at least 100 records per job",
	Quirks: []string{"chunk files go to S3, the job reads them with the service role (--bedrock-role-arn)",
		"clientRequestToken makes a repeated create return the first job", "jobs run one model each",
		"a minimum of records per job: batches are cut balanced, a group under it is refused"},
}
