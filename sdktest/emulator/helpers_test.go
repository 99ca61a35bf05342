package emulator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// start runs an emulator behind a real loopback HTTP server.
func start(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, emutest.Serve(t, s.Handler(), s.Close)
}

func oaClient(ts *httptest.Server, opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(ts.URL + "/v1/"), option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0)}
	return openai.NewClient(append(base, opts...)...)
}

func antClient(ts *httptest.Server, opts ...aoption.RequestOption) anthropic.Client {
	base := []aoption.RequestOption{aoption.WithBaseURL(ts.URL + "/"), aoption.WithAPIKey("sk-ant-test"),
		aoption.WithMaxRetries(0)}
	return anthropic.NewClient(append(base, opts...)...)
}

func upload(t *testing.T, c openai.Client, name string, data []byte) *openai.FileObject {
	t.Helper()
	f, err := c.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(bytes.NewReader(data), name, "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	checkSDK(t, f)
	return f
}

func createBatch(t *testing.T, c openai.Client, fileID string, ep openai.BatchNewParamsEndpoint, md map[string]string) *openai.Batch {
	t.Helper()
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: fileID, Endpoint: ep,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: md})
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	checkSDK(t, b)
	return b
}

// submit uploads data as name and creates its batch on ep.
func submit(t *testing.T, c openai.Client, name string, data []byte, ep openai.BatchNewParamsEndpoint) *openai.Batch {
	t.Helper()
	return createBatch(t, c, upload(t, c, name, data).ID, ep, nil)
}

// chatBatch submits a batch of n chat lines for model "m".
func chatBatch(t *testing.T, c openai.Client, n int) *openai.Batch {
	t.Helper()
	return submit(t, c, "x.jsonl", emutest.ChatLines(n, "m"), openai.BatchNewParamsEndpointV1ChatCompletions)
}

func getBatch(t *testing.T, c openai.Client, id string) *openai.Batch {
	t.Helper()
	b, err := c.Batches.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get batch: %v", err)
	}
	checkSDK(t, b)
	checkSpec(t, "Batch", b.RawJSON())
	return b
}

// download returns a file's lines.
func download(t *testing.T, c openai.Client, id string) []string {
	t.Helper()
	if id == "" {
		return nil
	}
	resp, err := c.Files.Content(context.Background(), id)
	if err != nil {
		t.Fatalf("content: %v", err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// outLine is a batch output/error file line.
type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseLines(t *testing.T, lines []string) []outLine {
	t.Helper()
	out := make([]outLine, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatalf("bad output line %q: %v", l, err)
		}
	}
	return out
}

// checkSDK fails when any field of an SDK-decoded value was present in the
// JSON but could not be decoded into its Go type (respjson status invalid).
func checkSDK(t *testing.T, v any) {
	t.Helper()
	var walk func(path string, rv reflect.Value)
	walk = func(path string, rv reflect.Value) {
		switch rv.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !rv.IsNil() {
				walk(path, rv.Elem())
			}
		case reflect.Slice, reflect.Array:
			for i := 0; i < rv.Len(); i++ {
				walk(fmt.Sprintf("%s[%d]", path, i), rv.Index(i))
			}
		case reflect.Struct:
			meta := rv.FieldByName("JSON")
			for i := 0; i < rv.NumField(); i++ {
				f := rv.Type().Field(i)
				if !f.IsExported() || f.Name == "JSON" {
					continue
				}
				if meta.IsValid() && meta.Kind() == reflect.Struct {
					if mf := meta.FieldByName(f.Name); mf.IsValid() && mf.CanInterface() {
						if fld, ok := mf.Interface().(interface {
							Valid() bool
							Raw() string
						}); ok && !fld.Valid() && fld.Raw() != "" && fld.Raw() != "null" {
							t.Errorf("SDK could not decode %s.%s from %s", path, f.Name, fld.Raw())
						}
					}
				}
				walk(path+"."+f.Name, rv.Field(i))
			}
		}
	}
	walk(reflect.TypeOf(v).String(), reflect.ValueOf(v))
}

var (
	specOnce sync.Once
	specText []string
)

// checkSpec checks that raw JSON carries every property the OpenAI OpenAPI
// spec (shared/specs/openai-openapi.yaml) lists as required for schema.
func checkSpec(t *testing.T, schema, raw string) {
	t.Helper()
	specOnce.Do(func() {
		b, err := os.ReadFile("../../../shared/specs/openai-openapi.yaml") // beside the repository
		if err == nil {
			specText = strings.Split(string(b), "\n")
		}
	})
	if specText == nil {
		return // spec not beside the repo
	}
	var req []string
	for i, l := range specText {
		if l != "    "+schema+":" {
			continue
		}
		for _, l := range specText[i+1:] {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "      ") {
				break // end of the schema block
			}
			if l == "      required:" {
				req = []string{}
			} else if req != nil && strings.HasPrefix(l, "        - ") {
				req = append(req, strings.TrimPrefix(l, "        - "))
			} else if len(req) > 0 {
				break
			}
		}
		break
	}
	if len(req) == 0 {
		t.Fatalf("schema %s has no required list in the spec", schema)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		t.Fatalf("%s: %v", schema, err)
	}
	for _, k := range req {
		if v, ok := obj[k]; !ok || string(v) == "null" {
			t.Errorf("%s: required property %q missing or null in %s", schema, k, raw)
		}
	}
}

func asErr[T error](err error, target *T) bool { return err != nil && errors.As(err, target) }
