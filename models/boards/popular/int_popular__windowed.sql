{#- What every shelf counts: per scope (restaurant:<id>, city:<id>, global), metric (views,
    orders), window (macros/windows.sql popular_windows) and item, the number of things that
    count once (a view per user and 10-minute bucket, an order per event_id; sql/0017) among
    the 10-second buckets as_of - W <= bucket < as_of. Each bucket counts for its restaurant,
    its city and global, once per window it lies in; merging the states never counts anything twice. -#}

{%- set windows = popular_windows() %}

with

as_of as (

    select as_of from {{ ref('int_popular__as_of') }}

),

buckets as (

    select * from {{ ref('stg_toplist__item_activity') }}
    where bucket >= (select as_of from {{ ref('int_popular__as_of') }})
        - toIntervalSecond({{ windows.values() | max }})
      and bucket < (select as_of from {{ ref('int_popular__as_of') }})

),

by_shelf as (

    select
        arrayJoin([
            concat('restaurant:', buckets.restaurant_id),
            concat('city:', buckets.city_id),
            'global'
        ]) as scope,
        if(buckets.type = 'view', 'views', 'orders') as metric,
        arrayJoin(arrayFilter(
            w -> buckets.bucket >= as_of.as_of - toIntervalSecond(w.2),
            [{% for name, length in windows.items() %}('{{ name }}', {{ length }}){{ ", " if not loop.last }}{% endfor %}]
        )).1 as window_name,
        buckets.item_id as item_id,
        buckets.counted as counted
    from buckets
    cross join as_of

)

select
    scope,
    metric,
    window_name,
    item_id,
    toInt64(uniqExactMerge(counted)) as score
from by_shelf
group by scope, metric, window_name, item_id
