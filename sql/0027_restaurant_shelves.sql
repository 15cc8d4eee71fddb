-- The public restaurant shelf (issue 29, GET /v1/restaurants/<id>/popular-items): the catalog
-- says which restaurant sells an item, its photo, and whether the restaurant features it. A
-- restaurant too new to rank (fewer than TOPLIST_SHELF_MIN_ORDERS orders even over 28 days)
-- shows its featured items, so its shelf is never empty. Rows loaded before keep '' and false.
ALTER TABLE ${database}.catalog_items
    ADD COLUMN IF NOT EXISTS restaurant_id String DEFAULT '' AFTER item_id,
    ADD COLUMN IF NOT EXISTS photo_url String DEFAULT '' AFTER price_cents,
    ADD COLUMN IF NOT EXISTS featured Bool DEFAULT false AFTER deleted;
