package wire

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/sluice-batch/sluice"
)

// A results file holds the final results one chunk attempt produced, one
// record per line, in any order:
//
//	<ordinal> TAB <flag> TAB <output line JSON> NEWLINE
//
// flag is 's' for a success and 'f' for a final failure. The dispatcher
// writes them; the merger reads them, orders them by ordinal and strips the
// framing. Every request has exactly one record across all results files of
// a job once it is final.

// AppendResultRecord appends one record to dst. line must be compact JSON
// without a newline.
func AppendResultRecord(dst []byte, ordinal int64, failed bool, line []byte) []byte {
	dst = strconv.AppendInt(dst, ordinal, 10)
	if failed {
		dst = append(dst, "\tf\t"...)
	} else {
		dst = append(dst, "\ts\t"...)
	}
	dst = append(dst, line...)
	return append(dst, '\n')
}

// AppendResultLine appends the record of one output line to dst: as
// AppendResultRecord(dst, ordinal, failed, json.Marshal(l)), without the
// intermediate encoding (AppendOutputLine).
func AppendResultLine(dst []byte, ordinal int64, failed bool, l *sluice.OutputLine) ([]byte, error) {
	n := len(dst)
	dst = strconv.AppendInt(dst, ordinal, 10)
	if failed {
		dst = append(dst, "\tf\t"...)
	} else {
		dst = append(dst, "\ts\t"...)
	}
	dst, err := AppendOutputLine(dst, l)
	if err != nil {
		return dst[:n], err
	}
	return append(dst, '\n'), nil
}

// ErrBadRecord is returned for a results record that does not parse.
var ErrBadRecord = errors.New("malformed results record")

// ParseResultRecord splits one record (with or without its newline).
func ParseResultRecord(rec []byte) (ordinal int64, failed bool, line []byte, err error) {
	rec = bytes.TrimSuffix(rec, []byte{'\n'})
	i := bytes.IndexByte(rec, '\t')
	if i <= 0 || len(rec) < i+3 || rec[i+2] != '\t' {
		return 0, false, nil, ErrBadRecord
	}
	ordinal, err = strconv.ParseInt(string(rec[:i]), 10, 64)
	if err != nil || ordinal < 0 {
		return 0, false, nil, ErrBadRecord
	}
	switch rec[i+1] {
	case 's':
	case 'f':
		failed = true
	default:
		return 0, false, nil, ErrBadRecord
	}
	return ordinal, failed, rec[i+3:], nil
}
