package provider

import (
	"fmt"

	"github.com/sluice-batch/sluice"
)

// XAICodec writes chunk files as xAI batch requests, one per line:
// {"batch_request_id":custom_id,"batch_request":{"chat_get_completion":body}}
// (docs/providers/xai.md). The same lines are the items of an add-requests
// call and the lines of a JSONL input file, so the chunk file is both,
// byte for byte.
type XAICodec struct {
	// MaxCustomID bounds a custom_id (0: any).
	MaxCustomID int
}

func (c XAICodec) Validate(it *sluice.Item) error {
	if it.URL != "/v1/chat/completions" {
		return fmt.Errorf("url %q is not a batch endpoint of xAI (accepted: /v1/chat/completions)%s", it.URL, otherFamily(it.URL, FamilyOpenAI))
	}
	if c.MaxCustomID > 0 && len([]rune(it.CustomID)) > c.MaxCustomID {
		return fmt.Errorf("custom_id %q is longer than the %d characters xAI allows", it.CustomID, c.MaxCustomID)
	}
	return nil
}

func (XAICodec) Envelope() sluice.Envelope { return sluice.Envelope{} }

func (XAICodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	body, err := itemBody(it)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `{"batch_request_id":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"batch_request":{"chat_get_completion":`...)
	dst = append(dst, body...)
	return append(dst, "}}\n"...), nil
}
