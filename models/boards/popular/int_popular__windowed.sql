{#- What every shelf counts: per scope (restaurant:<id>, city:<id>, global), metric (views,
    orders), window (macros/windows.sql popular_windows) and item, the number of things that
    count once (a view per user and 10-minute bucket, an order per event_id; sql/0017) among
    the minutes as_of - W <= minute < as_of. Each minute counts for its restaurant, its city
    and global, once per window it lies in; merging the states never counts anything twice. -#}

{%- set windows = popular_windows() %}

with

as_of as (

    select as_of from {{ ref('int_popular__as_of') }}

),

minutes as (

    select * from {{ ref('stg_toplist__item_activity') }}
    where minute >= (select as_of from {{ ref('int_popular__as_of') }})
        - toIntervalSecond({{ windows.values() | max }})
      and minute < (select as_of from {{ ref('int_popular__as_of') }})

),

by_shelf as (

    select
        arrayJoin([
            concat('restaurant:', minutes.restaurant_id),
            concat('city:', minutes.city_id),
            'global'
        ]) as scope,
        if(minutes.type = 'view', 'views', 'orders') as metric,
        arrayJoin(arrayFilter(
            w -> minutes.minute >= as_of.as_of - toIntervalSecond(w.2),
            [{% for name, length in windows.items() %}('{{ name }}', {{ length }}){{ ", " if not loop.last }}{% endfor %}]
        )).1 as window_name,
        minutes.item_id as item_id,
        minutes.counted as counted
    from minutes
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
