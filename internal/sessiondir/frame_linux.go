package sessiondir

// WriteEventFile publishes one event file in events/ (spec §7.2): the body
// is written to <name>.tmp relative to the held fd without following
// links, then renamed, so a consumer only ever sees complete files.
func WriteEventFile(eventsfd int, seq int64, body []byte) error {
	name := SeqName(seq)
	return writeAtomic(eventsfd, name, name+TmpSuffix, body)
}
