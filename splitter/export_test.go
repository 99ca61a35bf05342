package splitter

// SetMaxLineForTest lowers the line cap so tests reach it with small
// inputs. It returns a func restoring it.
func SetMaxLineForTest(maxLine int) func() {
	ml := maxLineBytes
	maxLineBytes = maxLine
	return func() { maxLineBytes = ml }
}

// RejectedCustomID is the custom_id Split reads from a line it rejects
// ("" when none could be read): with Config.SkipInvalid such a line takes
// its custom_id in the output, so a later line with it is a duplicate.
func RejectedCustomID(cfg Config, line []byte) string {
	p := newParser(&cfg)
	b := &block{data: line, first: 1}
	p.block(b)
	if len(b.recs) == 0 || b.recs[0].reason == "" {
		return ""
	}
	return b.recs[0].customID
}
