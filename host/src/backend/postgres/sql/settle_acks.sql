UPDATE rheo_deliveries d SET status = 'acked', lease_id = NULL, available_at = NULL
FROM unnest($3::text[], $4::text[]) AS a(event_id, lease_id)
WHERE d.stream = $1 AND d.group_name = $2
  AND d.event_id = a.event_id AND d.status = 'leased' AND d.lease_id = a.lease_id
RETURNING d.event_id
