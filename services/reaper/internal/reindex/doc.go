// Package reindex is the reaper's reindexer: the loop that rebuilds the
// jobs table's B-tree indexes once they are many times the size their
// entries need (ADR-0070). A long transaction keeps every row version a
// queue leaves behind, and the indexes grow with them; after the vacuum
// that follows, their emptied pages are reused but their files keep their
// size. A rebuild (REINDEX INDEX CONCURRENTLY) gives an index back its
// size while claims, reports and submits go on. It waits for nothing: a
// vacuum of the table in progress or a transaction holding an old snapshot
// postpones it to the next pass, and one that fails part-way is cleaned up
// at once and again at every pass.
package reindex
