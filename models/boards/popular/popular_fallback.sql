{{ config(order_by='(restaurant_id, rank)') }}

{#- Each restaurant's fallback shelf (GET /v1/restaurants/<id>/popular-items, source
    "fallback"): its top `shelf_fallback_top` items by all-time orders before as_of, voided
    orders left out, ranked with the v1 tie policy. A table of its own, replaced whole by each
    publication of the board: when publications stop or a ranking fails, the last one stays
    readable without any snapshot. An order is counted once per event_id within its bucket
    (sql/0017, 0029), and an event_id has one bucket, so the buckets' counts add up exactly. -#}

with

as_of as (

    select as_of from {{ ref('int_popular__as_of') }}

),

per_bucket as (

    select
        restaurant_id,
        item_id,
        uniqExactMerge(counted) as orders
    from {{ ref('stg_toplist__item_activity') }}
    where type = 'order'
      and bucket < (select as_of from as_of)
    group by bucket, city_id, restaurant_id, item_id

),

all_time as (

    select restaurant_id, item_id, toInt64(sum(orders)) as orders
    from per_bucket
    group by restaurant_id, item_id

),

ranked as (

    select
        restaurant_id,
        item_id,
        orders,
        {{ rank_items('v1', partition_by='restaurant_id', score='orders', item='item_id') }} as rank
    from all_time

)

select
    as_of.as_of as as_of,
    ranked.restaurant_id as restaurant_id,
    toUInt32(ranked.rank) as rank,
    ranked.item_id as item_id,
    ranked.orders as orders
from ranked
cross join as_of
where ranked.rank <= {{ var('shelf_fallback_top') }}
