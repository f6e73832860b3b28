-- The database file's size in bytes (free pages included; the WAL is not).
SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()
