// Package wire is the fast path of sluice's two line formats: an output
// line (sluice.OutputLine, byte for byte what json.Marshal writes) and the
// results record that frames it in a results file. The root package names
// the types; this package writes and reads them without encoding/json
// where the bytes allow (internal/jsonscan).
package wire

import (
	"encoding/json"
	"strconv"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/jsonscan"
)

// AppendOutputLine appends json.Marshal(l) to dst, byte for byte the same.
// A result that succeeded (a response, no error) whose strings need no
// escaping and whose body is already compact is written directly, without
// encoding/json re-validating and re-compacting the body; anything else
// goes through json.Marshal.
func AppendOutputLine(dst []byte, l *sluice.OutputLine) ([]byte, error) {
	r := l.Response
	if l.Error != nil || r == nil || len(r.Body) == 0 || !jsonscan.PlainString(l.CustomID) ||
		!jsonscan.PlainString(r.RequestID) || !r.MarkedCompact() && !jsonscan.Canonical(r.Body) {
		lc := *l // what json.Marshal gets escapes: only a copy, only here
		js, err := json.Marshal(&lc)
		if err != nil {
			return dst, err
		}
		return append(dst, js...), nil
	}
	dst = append(dst, `{"custom_id":"`...)
	dst = append(dst, l.CustomID...)
	dst = append(dst, `","response":{"status_code":`...)
	dst = strconv.AppendInt(dst, int64(r.StatusCode), 10)
	if r.RequestID != "" {
		dst = append(dst, `,"request_id":"`...)
		dst = append(dst, r.RequestID...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"body":`...)
	dst = append(dst, r.Body...)
	return append(dst, `},"error":null}`...), nil
}
