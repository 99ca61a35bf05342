package translate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestGoldenResultsParseInOpenAISDK parses every chat.completion of the
// translate package's result goldens (translate/testdata/golden/TARGET/
// NAME.result.json, which translate's TestGoldenResults holds each
// translated answer equal to) as the OpenAI SDK's ChatCompletion: what
// sluice writes for a chat line on another provider is what an OpenAI
// client reads.
func TestGoldenResultsParseInOpenAISDK(t *testing.T) {
	files, _ := filepath.Glob("../../translate/testdata/golden/*/*.result.json")
	n := 0
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "error_") {
			continue // error bodies: translate's validError
		}
		n++
		t.Run(strings.TrimPrefix(f, "../../translate/testdata/golden/"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var golden struct {
				Body json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal(raw, &golden); err != nil || len(golden.Body) == 0 {
				t.Fatalf("no body: %v", err)
			}
			var c struct {
				ID      string            `json:"id"`
				Choices []json.RawMessage `json:"choices"`
			}
			if err := json.Unmarshal(golden.Body, &c); err != nil {
				t.Fatal(err)
			}
			var oc openai.ChatCompletion
			if err := json.Unmarshal(golden.Body, &oc); err != nil {
				t.Fatalf("the OpenAI SDK cannot parse it: %v\n%s", err, golden.Body)
			}
			if oc.Object != "chat.completion" || len(oc.Choices) != len(c.Choices) || oc.ID != c.ID {
				t.Fatalf("the OpenAI SDK reads it differently:\n%s", golden.Body)
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d chat.completion goldens under translate/testdata/golden", n)
	}
}
