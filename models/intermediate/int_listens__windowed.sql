{#- A table, built once per publication: chart_rankings reads it once per policy, and as a
    view this aggregation would run again for every read. Unsorted: the rankings partition it
    themselves, and sorting its rows (650k at 10M events) cost 0.4 s of every publication. -#}
{{ config(materialized='table', order_by='tuple()') }}

{%- set windows = chart_windows() -%}

-- as_of is one scalar for the whole query (a cross join with the as_of table made every
-- window's test twice as slow), and the buckets before the longest bounded window are skipped
with (select as_of from {{ ref('int_chart__as_of') }}) as as_of,

buckets as (

    select * from {{ ref('stg_toplist__listen_buckets') }}
    where bucket_start >= as_of - toIntervalSecond({{ longest_bounded_window() }})

),

totals as (

    select * from {{ ref('stg_toplist__listen_totals') }}

),

pieces as (

    select false as is_total, bucket_start, country, song_id, listens from buckets
    union all
    select true as is_total, toDateTime(0, 'UTC') as bucket_start, country, song_id, listens from totals

),

-- one pass: each row counts for its country and for global (two grouping sets: half the work
-- of counting every row twice), once per window it is part of
by_scope as (

    select
        if(grouping(country) = 0, toString(country), 'global') as scope,
        song_id,
        {%- for window_name in windows %}
        sum(listens * {{ window_share(window_name, 'is_total', 'bucket_start', 'as_of') }}) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from pieces
    group by grouping sets ((country, song_id), (song_id))

),

final as (

    select
        window_name,
        scope,
        song_id,
        toUInt64(listens) as listens
    from by_scope
    array join
        [{% for window_name in windows %}'{{ window_name }}'{{ ", " if not loop.last }}{% endfor %}] as window_name,
        [{% for window_name in windows %}listens_{{ window_name }}{{ ", " if not loop.last }}{% endfor %}] as listens
    -- songs with no listens in a window never appear on its board
    where listens > 0

)

select * from final
