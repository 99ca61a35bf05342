package gemini

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
)

// GoogleErrors decodes Google's {"error":{"code","message","status",
// "details"}}. The code is error.status (INVALID_ARGUMENT, ...), followed
// by the reason of a google.rpc.ErrorInfo detail when there is one
// (INVALID_ARGUMENT/API_KEY_INVALID).
func GoogleErrors(body []byte) (code, message string) {
	e := gjson.GetBytes(body, "error")
	if e.Type == gjson.String {
		return "", e.String()
	}
	if !e.IsObject() {
		return "", ""
	}
	code = e.Get("status").String()
	e.Get("details").ForEach(func(_, d gjson.Result) bool {
		if r := d.Get("reason").String(); r != "" {
			code += "/" + r
			return false
		}
		return true
	})
	return code, e.Get("message").String()
}

// grpcName names the google.rpc.Code numbers a google.rpc.Status carries.
var grpcName = map[int64]string{
	1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
	6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
	10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
	15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

// httpStatus is the HTTP status Google maps each status name to
// (google/rpc/code.proto).
var httpStatus = map[string]int{
	"OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
	"NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
	"FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
	"INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}

// httpName is the status name of an HTTP status, for objects that carry
// only the HTTP code.
var httpName = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
	501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}

// StatusOf reads a google.rpc.Status (or an error envelope's inner object):
// its status name and the HTTP status that name stands for. code is a
// google.rpc.Code number, or an HTTP status (>= 100) where the object came
// from an HTTP error envelope; an explicit "status" name wins.
func StatusOf(st gjson.Result) (name string, status int) {
	name = st.Get("status").String()
	code := st.Get("code").Int()
	if name == "" {
		if code >= 100 {
			if name = httpName[int(code)]; name == "" {
				name = "HTTP_" + strconv.FormatInt(code, 10)
			}
			return name, int(code)
		}
		name = grpcName[code]
	}
	if name == "" {
		name = "UNKNOWN"
	}
	status, ok := httpStatus[name]
	if !ok {
		status = 500
	}
	return name, status
}

// operation is the long-running Operation a batch is seen as: the
// GenerateContentBatch in metadata (what the SDKs read), done, response
// and error at the top.
type operation struct {
	Name     string `json:"name"`
	Metadata struct {
		Name        string `json:"name"`
		Model       string `json:"model"`
		DisplayName string `json:"displayName"`
		State       string `json:"state"`
		InputConfig struct {
			FileName string `json:"fileName"`
		} `json:"inputConfig"`
		Output struct {
			ResponsesFile string `json:"responsesFile"`
		} `json:"output"`
		CreateTime time.Time `json:"createTime"`
		BatchStats struct {
			RequestCount           int64s `json:"requestCount"`
			SuccessfulRequestCount int64s `json:"successfulRequestCount"`
			FailedRequestCount     int64s `json:"failedRequestCount"`
			PendingRequestCount    int64s `json:"pendingRequestCount"`
		} `json:"batchStats"`
	} `json:"metadata"`
	Done     bool `json:"done"`
	Response struct {
		ResponsesFile string `json:"responsesFile"`
	} `json:"response"`
	Error json.RawMessage `json:"error"`
}

// int64s is an int64 sent as a JSON string (or number).
type int64s int64

func (n *int64s) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	*n = int64s(v)
	return err
}

func (o *operation) name() string {
	if o.Name != "" {
		return o.Name
	}
	return o.Metadata.Name
}

// MapState maps a batch state to sluice's BatchStatus. The wire says
// BATCH_STATE_*; the SDKs' JOB_STATE_* spelling is taken too. An unknown
// state counts as running.
func MapState(state string) sluice.BatchStatus {
	s := strings.TrimPrefix(strings.TrimPrefix(strings.ToUpper(state), "BATCH_STATE_"), "JOB_STATE_")
	switch s {
	case "PENDING", "QUEUED":
		return sluice.BatchValidating
	case "SUCCEEDED":
		return sluice.BatchCompleted
	case "FAILED":
		return sluice.BatchFailed
	case "CANCELLED":
		return sluice.BatchCancelled
	case "CANCELLING":
		return sluice.BatchCancelling
	case "EXPIRED":
		return sluice.BatchExpired
	}
	return sluice.BatchInProgress
}

// toBatch maps the Operation onto sluice's Batch. OutputFileID is the
// responses file; Completed and Failed are the successful and failed
// request counts; an Operation error becomes the batch error, its code
// the google.rpc.Code name.
func (o *operation) toBatch() sluice.Batch {
	md := &o.Metadata
	b := sluice.Batch{ID: o.name(), ProviderStatus: md.State, Status: MapState(md.State),
		OutputFileID: md.Output.ResponsesFile,
		Total:        int(md.BatchStats.RequestCount), Completed: int(md.BatchStats.SuccessfulRequestCount),
		Failed: int(md.BatchStats.FailedRequestCount)}
	if b.OutputFileID == "" {
		b.OutputFileID = o.Response.ResponsesFile
	}
	hasErr := len(o.Error) > 0 && string(o.Error) != "null"
	if md.State == "" && o.Done {
		b.Status = sluice.BatchCompleted
		if hasErr {
			b.Status = sluice.BatchFailed
		}
	}
	if hasErr {
		e := gjson.ParseBytes(o.Error)
		name, _ := StatusOf(e)
		b.Errors = []sluice.BatchError{{Code: name, Message: e.Get("message").String()}}
	}
	return b
}

// fileObject is a Files API File.
type fileObject struct {
	Name        string    `json:"name"`
	DisplayName string    `json:"displayName"`
	SizeBytes   int64s    `json:"sizeBytes"`
	State       string    `json:"state"`
	CreateTime  time.Time `json:"createTime"`
}
