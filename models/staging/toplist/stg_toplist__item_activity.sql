{#- What each 10-second bucket counts per city x restaurant x item and type, as stored
    (uniqExact states, sql/0017, 0029), unmerged: a window merges the states of its buckets. A state cannot
    lose a member, so the rows a voided event (sql/0026) was counted in are counted again
    from the raw events without the voided ones, by the rule the stored rows were made with
    (toplist_item_counted). -#}

with

voided as (

    select event_id from {{ source('toplist', 'item_event_voids') }}

),

touched as (

    select distinct
        toplist_item_bucket(event_time) as bucket, city_id, restaurant_id, item_id, type
    from {{ source('toplist', 'item_events') }}
    where event_id in (select event_id from voided)

),

recounted as (

    select
        toplist_item_bucket(event_time) as bucket,
        city_id,
        restaurant_id,
        item_id,
        type,
        uniqExactState(toplist_item_counted(type, user_id, event_time, event_id)) as counted
    from {{ source('toplist', 'item_events') }}
    -- the days a voided event fell on: the raw events are partitioned by day
    where toYYYYMMDD(event_time) in (select toYYYYMMDD(bucket) from touched)
      and (toplist_item_bucket(event_time), city_id, restaurant_id, item_id, type)
          in (select * from touched)
      and event_id not in (select event_id from voided)
    group by bucket, city_id, restaurant_id, item_id, type

)

select bucket, city_id, restaurant_id, item_id, type, counted
from {{ source('toplist', 'item_activity_by_10s') }}
where (bucket, city_id, restaurant_id, item_id, type) not in (select * from touched)

union all

select * from recounted
