package cloudflare

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// envelope is what Poll needs of an answer
// {"result":{...},"success":bool,"errors":[...],"messages":[...]}, read
// with a token scanner so a final answer of tens of MB is never held in
// memory.
type envelope struct {
	Status    string // result.status
	RequestID string // result.request_id
	Final     bool   // result.responses is present
	Success   *bool
	Errors    []apiError
	Usage     json.RawMessage // result.usage
}

type apiError struct {
	Code    json.Number `json:"code"`
	Message string      `json:"message"`
}

// scanEnvelope reads an answer. When visit is set, it is called with the
// decoder positioned on each element of result.responses, and must consume
// exactly that element; else the responses are skipped.
func scanEnvelope(r io.Reader, visit func(dec *json.Decoder, index int) error) (envelope, error) {
	var env envelope
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return env, err
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return env, err
		}
		switch key {
		case "result":
			if err := scanResult(dec, &env, visit); err != nil {
				return env, err
			}
		case "success":
			var b bool
			if err := dec.Decode(&b); err != nil {
				return env, fmt.Errorf("success: %w", err)
			}
			env.Success = &b
		case "errors":
			var errs []apiError
			if err := dec.Decode(&errs); err != nil {
				return env, fmt.Errorf("errors: %w", err)
			}
			env.Errors = errs
		default:
			if err := skipValue(dec); err != nil {
				return env, err
			}
		}
	}
	return env, expectDelim(dec, '}')
}

func scanResult(dec *json.Decoder, env *envelope, visit func(*json.Decoder, int) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil // "result": null
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("result is %v, not an object", tok)
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return err
		}
		switch key {
		case "status":
			if err := decodeString(dec, &env.Status); err != nil {
				return fmt.Errorf("result.status: %w", err)
			}
		case "request_id":
			if err := decodeString(dec, &env.RequestID); err != nil {
				return fmt.Errorf("result.request_id: %w", err)
			}
		case "usage":
			if err := dec.Decode(&env.Usage); err != nil {
				return fmt.Errorf("result.usage: %w", err)
			}
		case "responses":
			env.Final = true
			if err := scanResponses(dec, visit); err != nil {
				return err
			}
		default:
			if err := skipValue(dec); err != nil {
				return err
			}
		}
	}
	return expectDelim(dec, '}')
}

func scanResponses(dec *json.Decoder, visit func(*json.Decoder, int) error) error {
	if err := expectDelim(dec, '['); err != nil {
		return fmt.Errorf("result.responses: %w", err)
	}
	for i := 0; dec.More(); i++ {
		var err error
		if visit != nil {
			err = visit(dec, i)
		} else {
			err = skipValue(dec)
		}
		if err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

// decodeString reads a string, or null as "".
func decodeString(dec *json.Decoder, s *string) error {
	var p *string
	if err := dec.Decode(&p); err != nil {
		return err
	}
	if p != nil {
		*s = *p
	}
	return nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	k, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("expected an object key, got %v", tok)
	}
	return k, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, got %v", want, tok)
	}
	return nil
}

// skipValue consumes one value token by token, in bounded memory.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
		if depth < 0 {
			return errors.New("unbalanced JSON")
		}
	}
}
