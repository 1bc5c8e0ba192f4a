package grpcserver

// CompressedWaiting is how many compressed calls wait for s's budget.
func BudgetWaiting(s *Server) int64 { return s.budgetWaiting.Load() }
