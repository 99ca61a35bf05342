package provider

import (
	"bytes"
	"strings"

	"github.com/sluice-batch/sluice"
)

// FamilyVertex is Vertex AI batch prediction for Gemini
// (projects.locations.batchPredictionJobs, input and output in Cloud
// Storage; docs/providers/vertex.md).
const FamilyVertex Family = "vertex"

// VertexKeyPrefix starts every key sluice writes into a Vertex input
// line: "sluice:" + custom_id. The service imports the input BigQuery
// style and may coerce a numeric-looking string value (a custom_id "007"
// would come back as 7); a value starting with letters and a colon is
// read as nothing but a string. Decode takes only keys with this prefix.
const VertexKeyPrefix = "sluice:"

// VertexCodec writes chunk files as Vertex AI batch input JSONL, one
// {"key": "sluice:" + custom_id, "request": GenerateContentRequest} per
// line: the Gemini line shape (GeminiCodec's urls and checks), with the
// key made safe from the import's type coercion. The service echoes the
// extra top-level field into each output line, which is how results are
// mapped back (output order is not input order).
type VertexCodec struct{ GeminiCodec }

func (VertexCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	dst = append(dst, `{"key":`...)
	dst = appendJSONString(dst, VertexKeyPrefix+it.CustomID)
	dst = append(dst, `,"request":`...)
	dst = append(dst, bytes.TrimSpace(it.Body)...)
	return append(dst, "}\n"...), nil
}

func init() {
	// Chat completions lines translate to GenerateContentRequest as for
	// the Gemini Developer API (docs/translation.md).
	chatFamilies[FamilyVertex] = chatFamilies[FamilyGemini]
	Presets["vertex"] = Preset{
		Name: "vertex", Family: FamilyVertex,
		// {location}-aiplatform.googleapis.com, the location filled in by
		// the client (GOOGLE_CLOUD_LOCATION or --vertex-location).
		BaseURL: "https://{location}-aiplatform.googleapis.com", BaseURLEnv: "GOOGLE_VERTEX_BASE_URL",
		// An OAuth2 access token; else Application Default Credentials.
		KeyEnv: []string{"GOOGLE_OAUTH_ACCESS_TOKEN"}, AuthHeader: "Authorization",
		// 200,000 requests per job and a 1 GB input file (docs); no fixed
		// concurrent-job quota for Gemini: 100 is sluice's choice.
		Limits:      sluice.Limits{MaxBatchBytes: 1_000_000_000, MaxBatchRequests: 200_000, MaxLiveBatches: 100},
		Endpoints:   []string{"/v1beta/models/{model}:generateContent", "/v1/models/{model}:generateContent", "/v1/chat/completions"},
		InputFormat: "Gemini GenerateContentRequest body (model from the url)",
		APIVersion:  "v1",
		// No batch-API rate limit is documented; kept low like Gemini's.
		RequestsPerSecond: 2, Burst: 5,
		Notes:  "input and output in Cloud Storage (--vertex-bucket gs://…), OAuth2/ADC; 200,000 requests and 1 GB per job",
		Window: "queued up to 72h, then JOB_STATE_EXPIRED; cancelled after 24h running",
		Quirks: []string{
			"chunk files and predictions live in Cloud Storage (--vertex-bucket, or --store when it is gs://)",
			"each input line carries key \"sluice:<custom_id>\", echoed into its output line (output order is not input order)",
			"credentials: $GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials",
		},
	}
}

// VertexModel is the model resource of a chunk's model:
// publishers/google/models/<id>, or a resource name (projects/…,
// publishers/…) as given.
func VertexModel(model string) string {
	model = strings.TrimPrefix(model, "models/")
	if strings.HasPrefix(model, "projects/") || strings.HasPrefix(model, "publishers/") {
		return model
	}
	return "publishers/google/models/" + model
}
