package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// The checks below follow the Workers AI model schemas (cloudflare-docs
// src/content/workers-ai-models/*.json, the input the live API validates):
// an item the live API refuses with 5004 is refused here too. Where two
// published schemas of a model differ (the llama-3.3 prompt and its Async
// Batch item give top_p and the penalties different ranges), only what
// every one of them refuses is refused.

// cfEmbedDim is the output dimension of a Workers AI embedding model, as
// its catalog entry gives it (output_dimensions); other embedding models
// get fallback (Options.EmbeddingDim).
func cfEmbedDim(model string, fallback int) int {
	switch {
	case strings.Contains(model, "bge-small"):
		return 384
	case strings.Contains(model, "bge-base"):
		return 768
	case strings.Contains(model, "bge-large"), strings.Contains(model, "bge-m3"):
		return 1024
	}
	return fallback
}

// cfMaxTexts is the most texts one bge input may embed ("maxItems": 100).
const cfMaxTexts = 100

// cfTexts reads a bge "text": a non-empty string or an array of at most
// 100 non-empty strings.
func cfTexts(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, errors.New("required properties at '/' are 'text'")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil && string(raw) != "null" {
		if one == "" {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, errors.New("String length of '/text' is less than 1")
		}
		return []string{one}, nil
	}
	var many []*string
	if json.Unmarshal(raw, &many) != nil || many == nil {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, errors.New("Type mismatch of '/text', expected a string or an array of strings")
	}
	if len(many) == 0 {
		return nil, errors.New("required properties at '/' are 'text'")
	}
	if len(many) > cfMaxTexts {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, fmt.Errorf("Array of '/text' has more than %d items", cfMaxTexts)
	}
	texts := make([]string, len(many))
	for i, t := range many {
		switch {
		case t == nil:
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, fmt.Errorf("Type mismatch of '/text/%d', expected a string", i)
		case *t == "":
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, fmt.Errorf("String length of '/text/%d' is less than 1", i)
		}
		texts[i] = *t
	}
	return texts, nil
}

// cfPooling checks a bge "pooling": "mean" or "cls" when present.
func cfPooling(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var p string
	if json.Unmarshal(raw, &p) != nil || p != "mean" && p != "cls" {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return errors.New("Value of '/pooling' must be one of 'mean', 'cls'")
	}
	return nil
}

// cfTyped checks that obj[key], when present, is a JSON value of the
// schema type typ ("string", "boolean" or "object"); null is none of them.
func cfTyped(obj map[string]json.RawMessage, key, typ string) error {
	raw, ok := obj[key]
	if !ok {
		return nil
	}
	var v any
	json.Unmarshal(raw, &v)
	var good bool
	switch typ {
	case "string":
		_, good = v.(string)
	case "boolean":
		_, good = v.(bool)
	case "object":
		_, good = v.(map[string]any)
	}
	if !good {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return fmt.Errorf("Type mismatch of '/%s', expected a %s", key, typ)
	}
	return nil
}

// cfNumber is a numeric text generation parameter and the range every
// published schema allows.
type cfNumber struct {
	key      string
	min, max float64
	integer  bool
}

var cfLLMNumbers = []cfNumber{
	{"temperature", 0, 5, false},
	{"top_p", 0, 2, false},
	{"top_k", 1, 50, true},
	{"seed", 1, 9999999999, true},
	{"repetition_penalty", 0, 2, false},
	{"frequency_penalty", -2, 2, false},
	{"presence_penalty", -2, 2, false},
}

// checkCFLLMParams checks the optional parameters of a text generation
// input: numbers in range, stream and raw booleans, lora a string,
// response_format an object whose type is json_object or json_schema.
func checkCFLLMParams(obj map[string]json.RawMessage) error {
	for _, n := range cfLLMNumbers {
		raw, ok := obj[n.key]
		if !ok {
			continue
		}
		var v float64
		if json.Unmarshal(raw, &v) != nil || string(raw) == "null" || n.integer && v != math.Trunc(v) {
			kind := "a number"
			if n.integer {
				kind = "an integer"
			}
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return fmt.Errorf("Type mismatch of '/%s', expected %s", n.key, kind)
		}
		if v < n.min || v > n.max {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return fmt.Errorf("Value of '/%s' must be between %g and %g", n.key, n.min, n.max)
		}
	}
	for key, typ := range map[string]string{"stream": "boolean", "raw": "boolean", "lora": "string", "response_format": "object"} {
		if err := cfTyped(obj, key, typ); err != nil {
			return err
		}
	}
	if raw, ok := obj["response_format"]; ok {
		var rf map[string]json.RawMessage
		json.Unmarshal(raw, &rf)
		if t, ok := rf["type"]; ok {
			var s string
			if json.Unmarshal(t, &s) != nil || s != "json_object" && s != "json_schema" {
				//lint:ignore ST1005 Cloudflare's own message, verbatim
				return errors.New("Value of '/response_format/type' must be one of 'json_object', 'json_schema'")
			}
		}
	}
	return nil
}

// checkCFReference refuses a batch item whose external_reference is not a
// string (the Async Batch item schema types it "string").
func checkCFReference(item []byte) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(item, &obj) != nil {
		return nil // validateCloudflare names it
	}
	return cfTyped(obj, "external_reference", "string")
}
