package vertex

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/gemini"
)

// job is a BatchPredictionJob as the REST API answers it.
type job struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Model       string `json:"model"`
	State       string `json:"state"`
	InputConfig struct {
		GcsSource struct {
			URIs []string `json:"uris"`
		} `json:"gcsSource"`
	} `json:"inputConfig"`
	OutputInfo struct {
		GcsOutputDirectory string `json:"gcsOutputDirectory"`
	} `json:"outputInfo"`
	CompletionStats *struct { // int64 as JSON strings
		SuccessfulCount int64 `json:"successfulCount,string"`
		FailedCount     int64 `json:"failedCount,string"`
		IncompleteCount int64 `json:"incompleteCount,string"`
	} `json:"completionStats"`
	CreateTime time.Time       `json:"createTime"`
	Error      json.RawMessage `json:"error"`
}

// MapState maps a JobState to sluice's BatchStatus as gemini.MapState
// reads the JOB_STATE_* names; PARTIALLY_SUCCEEDED, Vertex's own, has
// ended with predictions to read. An unknown state counts as running.
func MapState(state string) sluice.BatchStatus {
	if strings.TrimPrefix(strings.ToUpper(state), "JOB_STATE_") == "PARTIALLY_SUCCEEDED" {
		return sluice.BatchCompleted
	}
	return gemini.MapState(state)
}

// inputURI is the job's (only) input file.
func (j *job) inputURI() string {
	if len(j.InputConfig.GcsSource.URIs) != 1 {
		return ""
	}
	return j.InputConfig.GcsSource.URIs[0]
}

// toBatch maps the job onto sluice's Batch: OutputFileID is its output
// directory; a job error (FAILED; CANCELLED has code 1) becomes the
// batch error, its code the google.rpc.Code name.
func (j *job) toBatch() sluice.Batch {
	b := sluice.Batch{ID: j.Name, ProviderStatus: j.State, Status: MapState(j.State),
		OutputFileID: j.OutputInfo.GcsOutputDirectory}
	if s := j.CompletionStats; s != nil {
		b.Completed, b.Failed = int(s.SuccessfulCount), int(s.FailedCount)
		if s.IncompleteCount >= 0 {
			b.Total = int(s.SuccessfulCount + s.FailedCount + s.IncompleteCount)
		}
	}
	if len(j.Error) > 0 && string(j.Error) != "null" && b.Status == sluice.BatchFailed {
		e := gjson.ParseBytes(j.Error)
		name, _ := gemini.StatusOf(e)
		b.Errors = []sluice.BatchError{{Code: name, Message: e.Get("message").String()}}
	}
	return b
}
