package translate

import "github.com/tidwall/gjson"

// Why a parameter can be left out without changing the answer.
var dropReasons = map[string]string{
	"stream_options":         "it only applies to streaming, which a batch does not do",
	"store":                  "stored completions are an OpenAI feature; they do not change the answer",
	"metadata":               "OpenAI's tags for stored completions; they do not change the answer",
	"service_tier":           "a latency and pricing tier; the batch API sets its own",
	"prompt_cache_key":       "a caching hint; caching does not change the answer",
	"prompt_cache_retention": "a caching hint; caching does not change the answer",
	"prompt_cache_options":   "a caching hint; caching does not change the answer",
	"prediction":             "predicted outputs make generation faster without changing it",
}

// Why a parameter cannot be translated, whatever the target.
var rejectReasons = map[string]string{
	"audio":              "audio output is not translated",
	"verbosity":          "has no equivalent on %s, and it changes the answer",
	"web_search_options": "web search is not translated",
	"functions":          "the deprecated functions are not translated; use tools",
	"function_call":      "the deprecated function_call is not translated; use tool_choice",
	"moderation":         "has no equivalent on %s",
}

// others judges the parameters no common field holds: pass lists those
// the target takes as they are (they are returned for it to copy), the
// rest are dropped with a warning or rejected.
func others(c *chat, target string, warn func(Warning), pass map[string]bool) ([]param, error) {
	var out []param
	for _, p := range c.set {
		if pass[p.key] {
			out = append(out, p)
			continue
		}
		switch p.key {
		case "stream":
			if p.val.Type == gjson.True {
				return nil, errf("stream", "a batch request cannot stream")
			}
			continue
		case "store":
			if p.val.Type == gjson.False {
				continue
			}
		case "modalities":
			if p.val.IsArray() && len(p.val.Array()) == 1 && p.val.Array()[0].String() == "text" {
				continue
			}
			return nil, errf("modalities", "only [\"text\"] can be translated")
		}
		if r, ok := dropReasons[p.key]; ok {
			warn(Warning{Param: p.key, Reason: r})
			continue
		}
		r, ok := rejectReasons[p.key]
		if !ok {
			r = "has no equivalent on %s"
		}
		return nil, errf(p.key, r, target)
	}
	return out, nil
}
