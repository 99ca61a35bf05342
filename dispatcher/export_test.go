package dispatcher

// Halted reports whether d has seen a fatal error (no new provider call
// starts): the event the fatal tests wait for instead of a sleep.
func Halted(d *Dispatcher) bool { return d.halted.Load() }
