package grpcserver

// CompressedWaiting is how many compressed calls wait for s's budget.
func CompressedWaiting(s *Server) int64 { return s.compressedWaiting.Load() }
