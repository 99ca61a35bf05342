package splitter

// SetMaxLineForTest lowers the line cap so tests reach it with small
// inputs. It returns a func restoring it.
func SetMaxLineForTest(maxLine int) func() {
	ml := maxLineBytes
	maxLineBytes = maxLine
	return func() { maxLineBytes = ml }
}
