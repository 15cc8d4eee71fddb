{%- set windows = chart_windows() -%}

with

buckets as (

    select * from {{ ref('stg_toplist__listen_buckets') }}

),

as_of as (

    select as_of from {{ ref('int_chart__as_of') }}

),

-- one pass over the buckets before as_of, one sum per window
by_country as (

    select
        buckets.country as country,
        buckets.song_id as song_id,
        {%- for window_name in windows %}
        sumIf(buckets.listens, {{ in_window('buckets.bucket_start', window_name, 'as_of.as_of') }}) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from buckets
    cross join as_of
    where buckets.bucket_start < as_of.as_of
    group by buckets.country, buckets.song_id

),

by_country_and_window as (

    select
        window_name,
        country as scope,
        song_id,
        listens
    from by_country
    array join
        [{% for window_name in windows %}'{{ window_name }}'{{ ", " if not loop.last }}{% endfor %}] as window_name,
        [{% for window_name in windows %}listens_{{ window_name }}{{ ", " if not loop.last }}{% endfor %}] as listens
    -- songs with no listens in a window never appear on its board
    where listens > 0

),

global as (

    select
        window_name,
        'global' as scope,
        song_id,
        sum(listens) as listens
    from by_country_and_window
    group by window_name, song_id

),

final as (

    select window_name, scope, song_id, toUInt64(listens) as listens from by_country_and_window
    union all
    select window_name, scope, song_id, toUInt64(listens) as listens from global

)

select * from final
