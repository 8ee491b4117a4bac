package mqtt

// TrackSessions has f told every session ID a subscriber of this process
// uses, so that tests can remove the sessions they leave on a shared
// broker.
func TrackSessions(f func(id string)) { onSession = f }
