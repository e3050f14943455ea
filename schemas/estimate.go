package schemas

// WindowEndUnixMs is the end of the processor window an estimate belongs
// to, whatever its kind (0 for an empty envelope).
func (e *Estimate) WindowEndUnixMs() int64 {
	switch k := e.GetKind().(type) {
	case *Estimate_Engine:
		return k.Engine.GetWindowEndUnixMs()
	case *Estimate_Demand:
		return k.Demand.GetWindowEndUnixMs()
	case *Estimate_Network:
		return k.Network.GetWindowEndUnixMs()
	}
	return 0
}
