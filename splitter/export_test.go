package splitter

// SetLimitsForTest lowers the line cap and the pending-row memory so tests
// reach those paths with small inputs. It returns a func restoring them.
func SetLimitsForTest(maxLine, pendingMem int) func() {
	ml, pm := maxLineBytes, pendingMemory
	maxLineBytes, pendingMemory = maxLine, pendingMem
	return func() { maxLineBytes, pendingMemory = ml, pm }
}
