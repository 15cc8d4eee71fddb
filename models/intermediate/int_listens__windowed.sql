{#- A table, built once per publication: chart_rankings reads it once per policy, and as a
    view this aggregation would run again for every read. -#}
{{ config(materialized='table', order_by='(window_name, scope, song_id)') }}

{%- set windows = chart_windows() -%}

with

as_of as (

    select as_of from {{ ref('int_chart__as_of') }}

),

-- the buckets the windows need: the longest bounded window's, and those at or after as_of
-- (which `all` takes back out of the totals); the scalar as_of lets the engine skip the rest
buckets as (

    select * from {{ ref('stg_toplist__listen_buckets') }}
    where bucket_start >= (select as_of from {{ ref('int_chart__as_of') }}) - toIntervalSecond({{ longest_bounded_window() }})

),

totals as (

    select * from {{ ref('stg_toplist__listen_totals') }}

),

pieces as (

    select 'bucket' as piece, bucket_start, country, song_id, listens from buckets
    union all
    select 'total' as piece, toDateTime(0, 'UTC') as bucket_start, country, song_id, listens from totals

),

-- one pass: each row counts for its country and for global, once per window it is part of
by_scope as (

    select
        arrayJoin([toString(pieces.country), 'global']) as scope,
        pieces.song_id as song_id,
        {%- for window_name in windows %}
        sum(pieces.listens * {{ window_share(window_name, 'pieces.piece', 'pieces.bucket_start', 'as_of.as_of') }}) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from pieces
    cross join as_of
    group by scope, song_id

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
