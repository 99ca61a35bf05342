package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/compat"
)

// createBatchRequest is the spec's CreateBatchRequest.
type createBatchRequest struct {
	InputFileID        string            `json:"input_file_id"`
	Endpoint           string            `json:"endpoint"`
	CompletionWindow   string            `json:"completion_window"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	OutputExpiresAfter *expiresAfter     `json:"output_expires_after,omitempty"`
}

// expiresAfter is the spec's BatchFileExpirationAfter.
type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Seconds int64  `json:"seconds"`
}

// fileObject is the spec's OpenAIFile, as far as sluice reads it.
type fileObject struct {
	ID        string   `json:"id"`
	Bytes     int64    `json:"bytes"`
	CreatedAt flexTime `json:"created_at"`
	Filename  string   `json:"filename"`
	Purpose   string   `json:"purpose"`
	Status    string   `json:"status"`
}

type fileList struct {
	Data    []fileObject `json:"data"`
	HasMore bool         `json:"has_more"`
	LastID  string       `json:"last_id"`
}

// batchObject is the spec's Batch, as far as sluice reads it.
type batchObject struct {
	ID               string   `json:"id"`
	Status           string   `json:"status"`
	Endpoint         string   `json:"endpoint"`
	InputFileID      string   `json:"input_file_id"`
	OutputFileID     string   `json:"output_file_id"`
	ErrorFileID      string   `json:"error_file_id"`
	CompletionWindow string   `json:"completion_window"`
	CreatedAt        flexTime `json:"created_at"`
	Errors           *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Line    *int   `json:"line"`
		} `json:"data"`
	} `json:"errors"`
	RequestCounts *struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
	Metadata metadata `json:"metadata"`
}

type batchList struct {
	Data    []batchObject `json:"data"`
	HasMore bool          `json:"has_more"`
	LastID  string        `json:"last_id"`
}

// toBatch maps the wire batch onto sluice's.
func (w *batchObject) toBatch() sluice.Batch {
	b := sluice.Batch{
		ID:             w.ID,
		Status:         compat.MapStatus(w.Status),
		ProviderStatus: w.Status,
		OutputFileID:   w.OutputFileID,
		ErrorFileID:    w.ErrorFileID,
	}
	if w.Errors != nil {
		for _, e := range w.Errors.Data {
			be := sluice.BatchError{Code: e.Code, Message: e.Message}
			if e.Line != nil {
				be.Line = *e.Line
			}
			b.Errors = append(b.Errors, be)
		}
	}
	if rc := w.RequestCounts; rc != nil {
		b.Total, b.Completed, b.Failed = rc.Total, rc.Completed, rc.Failed
	}
	return b
}

// flexTime reads unix seconds (OpenAI) or an RFC 3339 string (Azure's
// documents); null or unknown forms read as the zero time.
type flexTime struct{ time.Time }

func (t *flexTime) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if v, err := time.Parse(time.RFC3339Nano, s); err == nil {
			t.Time = v
		} else if n, err := strconv.ParseFloat(s, 64); err == nil {
			t.Time = time.Unix(int64(n), 0)
		}
		return nil
	}
	n, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("created_at %s: %w", b, err)
	}
	t.Time = time.Unix(int64(n), 0)
	return nil
}

// metadata reads string values, and any other JSON value as its text, so a
// provider that echoes metadata loosely does not break a listing.
type metadata map[string]string

func (m *metadata) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return nil
	}
	*m = make(metadata, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		(*m)[k] = s
	}
	return nil
}
