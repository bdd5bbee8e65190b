package snapshot

// Where a store keeps a snapshot's bytes, for the tests that corrupt them
// behind its back.

// DirFile is the path of info's file under d's root.
func DirFile(d *Dir, info Info) string {
	return sessionDir(info.Tenant, info.Session) + "/" + snapName(info)
}

// DirTemp is the path of a temporary of (tenant, session) under d's root,
// as a Put begun now would name it.
func DirTemp(tenant, session string) string {
	return sessionDir(tenant, session) + "/" + tmpPrefix + newInfo(tenant, session).ID
}

// S3DataKey is the key of info's data object.
func S3DataKey(s *S3, info Info) string { return s.dataKey(info.Tenant, info.Session, info.ID) }

// S3NewDataKey is the data key a Put begun now would write.
func S3NewDataKey(s *S3, tenant, session string) string {
	return s.dataKey(tenant, session, newInfo(tenant, session).ID)
}

// S3IndexedRecords says how many records s's record index holds.
func S3IndexedRecords(s *S3) int {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	return len(s.index.m)
}
